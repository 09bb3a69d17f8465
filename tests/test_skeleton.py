"""The method skeleton (flows/skeleton.py): a flow body that forgets to publish fails and leaves
its MLflow run FAILED and its run directory resumable; the publish tail writes a validated record."""
from __future__ import annotations

import json

import pytest
from prefect import flow

from flows.skeleton import method_run
from paperline.metrics import MethodMetrics
from tasks import track
from tasks.publish import Report


@flow
def forgets_to_publish():
    with method_run("dnc", "tiny", []) as run:
        with run.context.child("K4_L1"):
            pass


@flow
def publishes(headline: dict):
    with method_run("dnc", "tiny", []) as run:
        with run.context.child("K4_L1"):
            pass
        metrics = MethodMetrics(method="dnc", profile="tiny", headline=headline, primary_metric="objective",
                                rows={"K4_L1": {"objective": 0.5, "rank": 3}})
        return run.publish(Report(metrics))


def test_a_flow_that_ends_without_publishing_fails_and_stays_resumable(project, prefect_server):
    with pytest.raises(RuntimeError, match="ended without publishing"):
        forgets_to_publish()
    state = json.loads((project / "models" / "dnc" / "run.json").read_text())
    assert not state["complete"]
    assert track.client().get_run(state["parent_run"]).info.status == "FAILED"
    assert not (project / "metrics" / "dnc.json").exists()


def test_publish_writes_the_record_and_puts_each_row_on_its_child_run(project, prefect_server):
    record = publishes({"claim": True})
    assert json.loads((project / "metrics" / "dnc.json").read_text()) == record
    state = json.loads((project / "models" / "dnc" / "run.json").read_text())
    assert state["complete"]
    c = track.client()
    parent = c.get_run(state["parent_run"])
    assert parent.info.status == "FINISHED" and parent.data.metrics == {}  # a bool headline is no metric
    child = c.get_run(track.child_runs(track.Run(parent.info.run_id, parent.info.experiment_id))["K4_L1"])
    assert child.data.metrics == {"objective": 0.5, "rank": 3.0}
    table = json.loads((project / "mlartifacts" / "dnc" / parent.info.run_id / "artifacts" / "comparison.json").read_text())
    assert table["columns"] == ["variant", "objective", "rank"] and table["data"] == [["K4_L1", 0.5, 3]]
    pointer = json.loads((project / "runs" / "dnc" / "mlflow_run.json").read_text())
    assert pointer["run_id"] == parent.info.run_id
