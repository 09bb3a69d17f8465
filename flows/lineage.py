"""Links a method's flow run to the deployment run that started it through DVC.

A deployment run (flows/dvc_run.py) runs `dvc repro` or `dvc exp run`, and DVC starts the method's
flow in a stage process of its own, so Prefect cannot see that one started the other. The
deployment's DVC task passes its flow-run and task-run ids down in the environment (DVC hands its
environment to stage commands); the stage's flow run is then created as a subflow of that task,
as `run_deployment` links its runs, so the Prefect UI shows one tree, and it carries tags naming
the DVC experiment and the deployment run.
"""
from __future__ import annotations

import os
import uuid
from typing import Any

from tasks.track import dvc_experiment

PARENT_FLOW_RUN_ENV = "PAPERLINE_PARENT_FLOW_RUN_ID"
PARENT_TASK_RUN_ENV = "PAPERLINE_PARENT_TASK_RUN_ID"


def parent_env() -> dict[str, str]:
    """The variables that link runs started below the current Prefect task run to it."""
    from prefect.context import TaskRunContext

    ctx = TaskRunContext.get()
    if ctx is None:
        return {}
    return {PARENT_FLOW_RUN_ENV: str(ctx.task_run.flow_run_id), PARENT_TASK_RUN_ENV: str(ctx.task_run.id)}


def lineage_tags() -> list[str]:
    """Prefect tags of a flow run started by DVC: the experiment (`repro` under a plain
    `dvc repro`) and the deployment run, when there is one."""
    experiment = dvc_experiment()
    tags = [] if experiment == "none" else [f"dvc-exp:{experiment}"]
    if parent := os.environ.get(PARENT_FLOW_RUN_ENV):
        tags.append(f"deployment-run:{parent}")
    return tags


def run_linked(flow: Any, **parameters: Any) -> Any:
    """Call `flow(**parameters)`: as a subflow of the deployment run named in the environment,
    else as a flow run of its own; with the lineage tags either way."""
    from prefect import tags

    with tags(*lineage_tags()):
        parent_flow_run = os.environ.get(PARENT_FLOW_RUN_ENV)
        if not parent_flow_run:
            return flow(**parameters)
        from prefect.flow_engine import run_flow

        flow_run = _create_subflow_run(flow, parameters, uuid.UUID(parent_flow_run),
                                       os.environ.get(PARENT_TASK_RUN_ENV))
        return run_flow(flow, flow_run=flow_run, parameters=parameters)


def _create_subflow_run(flow: Any, parameters: dict[str, Any], parent_flow_run: uuid.UUID,
                        parent_task_run: str | None) -> Any:
    """A pending flow run whose tracking task run sits in the parent flow run, below the task that
    started DVC; the server mirrors the flow run's state onto that task run."""
    from prefect import Task
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import TaskRunResult
    from prefect.context import TagsContext
    from prefect.states import Pending

    tracking_task = Task(name=flow.name, fn=lambda: None)
    task_inputs = {"__parents__": [TaskRunResult(id=uuid.UUID(parent_task_run))]} if parent_task_run else {}
    with get_client(sync_client=True) as client:
        tracking = client.create_task_run(task=tracking_task, flow_run_id=parent_flow_run,
                                          dynamic_key=uuid.uuid4().hex, task_inputs=task_inputs,
                                          state=Pending())
        return client.create_flow_run(flow=flow, parameters=flow.serialize_parameters(parameters),
                                      parent_task_run_id=tracking.id, state=Pending(),
                                      tags=TagsContext.get().current_tags)
