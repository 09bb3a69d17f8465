"""The unit-of-work prologue (tasks/unit.py): threads set, a `gpu` slot held and its device given,
the child run named and parented with the unit's params (and the device unless told not to),
FAILED when the unit raises with the slot given back, the method's models folder."""
from __future__ import annotations

import pytest
import torch

from tasks import track
from tasks.runners import ensure_gpu_limit
from tasks.unit import unit


class Boom(Exception):
    pass


def test_a_unit_sets_threads_holds_a_slot_and_records_its_child_run(project, prefect_server):
    ensure_gpu_limit()
    threads = torch.get_num_threads()
    try:
        with track.parent_run("m", "tiny", {}, "generated") as parent:
            ctx = track.RunContext("m", "tiny", "generated", parent)
            with unit(ctx, "v1", {"K": 4}, threads=1) as u:
                assert torch.get_num_threads() == 1
                assert u.devices == [u.device] and u.device.type == ("cuda" if torch.cuda.is_available() else "cpu")
                assert u.models == project / "models" / "m"
            # a unit's run under another run (a seed's under its variant's), without the device param
            with unit(ctx, "v1/seed0", {"seed": 0}, parent=u.run, log_device=False) as nested:
                pass
            with unit(ctx, threads=2) as bare:  # no run of its own: its runs are the task's
                assert bare.run is None and torch.get_num_threads() == 2
            with pytest.raises(Boom), unit(ctx, "broken"):
                raise Boom
            with unit(ctx, "after") as after:  # the broken unit gave its slot back
                pass
    finally:
        torch.set_num_threads(threads)
    c = track.client()
    v1, seed0 = c.get_run(u.run.run_id), c.get_run(nested.run.run_id)
    assert v1.info.run_name == "v1" and v1.info.status == "FINISHED"
    assert v1.data.params == {"K": "4", "device": str(u.device)}
    assert v1.data.tags["mlflow.parentRunId"] == parent.run_id
    assert seed0.info.run_name == "v1/seed0" and seed0.data.params == {"seed": "0"}
    assert seed0.data.tags["mlflow.parentRunId"] == u.run.run_id
    children = track.child_runs(parent)
    assert set(children) == {"v1", "broken", "after"} and children["after"] == after.run.run_id
    assert c.get_run(children["broken"]).info.status == "FAILED"


def test_a_gpu_task_is_annotated_for_its_runner_type_decided_once():
    import dask
    from prefect.task_runners import ThreadPoolTaskRunner

    from tasks.runners import gpu_annotation

    dask_runner = type("DaskTaskRunner", (), {})  # by class name: prefect-dask need not be imported
    with gpu_annotation(dask_runner)(2):
        assert dask.get_annotations() == {"resources": {"GPU": 2}}
    with gpu_annotation(ThreadPoolTaskRunner)(1):
        assert dask.get_annotations() == {}
    assert gpu_annotation(dask_runner) is gpu_annotation(dask_runner)  # looked up once per runner type
