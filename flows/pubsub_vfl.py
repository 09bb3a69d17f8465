"""PubSub-VFL: two-party split learning whose parties (a parameter server and workers each, OS
processes) meet over zmq publish/subscribe channels keyed by batch id, against synchronous VFL,
VFL-PS, AVFL and AVFL-PS over the same channels: accuracy, wall time, waiting time, the planner."""
from __future__ import annotations

from prefect import flow

from flows.skeleton import method_run
from tasks.pubsub_vfl import METHOD, data_version, report, train_all
from tasks.runners import submit_gpu


@flow(name="pubsub_vfl", log_prints=True)
def pubsub_vfl_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    # data: a missing table fails before the run starts; the data itself is read in the task
    with method_run(METHOD, profile, overrides, data=data_version) as run:
        trained = submit_gpu(train_all, run.cfg, run.context)
        return run.publish(report.submit(run.cfg, trained, run.context))
