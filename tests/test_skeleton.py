"""The method skeleton (flows/skeleton.py): a flow body that forgets to publish fails and leaves
its MLflow run FAILED and its run directory resumable; the publish tail writes a validated record."""
from __future__ import annotations

import json

import pytest
from prefect import flow

from flows.skeleton import method_run
from paperline.claims import ClaimSpec
from paperline.metrics import MethodMetrics
from tasks import track
from tasks.publish import Report


@flow
def forgets_to_publish():
    with method_run("dnc", "tiny", []) as run:
        with run.context.child("K4_L1"):
            pass


@flow
def publishes(headline: dict, claims: list | None = None):
    with method_run("dnc", "tiny", []) as run:
        with run.context.child("K4_L1"):
            pass
        metrics = MethodMetrics(method="dnc", profile="tiny", headline=headline, primary_metric="objective",
                                rows={"K4_L1": {"objective": 0.5, "rank": 3}}, claims=claims or [])
        return run.publish(Report(metrics))


def test_a_flow_that_ends_without_publishing_fails_and_stays_resumable(project, prefect_server):
    with pytest.raises(RuntimeError, match="ended without publishing"):
        forgets_to_publish()
    state = json.loads((project / "models" / "dnc" / "run.json").read_text())
    assert not state["complete"]
    assert track.client().get_run(state["parent_run"]).info.status == "FAILED"
    assert not (project / "results" / "dnc.json").exists()


def test_publish_writes_the_record_and_puts_each_row_on_its_child_run(project, prefect_server):
    claim = ClaimSpec(name="below_init", claim="below the initial objective", metric="objective", method="K4_L1",
                      versus="init", direction="lower", trivial=True).paired([0.5, 0.4, 0.6], [1.0, 1.1, 0.9])
    record = publishes({"converged": True}, [claim])
    assert json.loads((project / "results" / "dnc.json").read_text()) == record
    # what `dvc metrics show` prints: the outcome counts of the claims, no figure of the record
    assert json.loads((project / "metrics" / "dnc.json").read_text()) == {"held": 1, "failed": 0, "inconclusive": 0}
    state = json.loads((project / "models" / "dnc" / "run.json").read_text())
    assert state["complete"]
    c = track.client()
    parent = c.get_run(state["parent_run"])
    # a bool headline is no metric; each claim's numbers are, its verdict a tag, and both descriptions name it
    assert parent.info.status == "FINISHED" and parent.data.metrics == {
        "claim.below_init.effect": pytest.approx(-0.5), "claim.below_init.low": pytest.approx(claim.low),
        "claim.below_init.high": pytest.approx(claim.high), "claim.below_init.seeds": 3.0}
    assert parent.data.tags["claim.below_init.verdict"] == "shown" and parent.data.tags["verdicts"] == "1 shown"
    described = c.get_experiment(parent.info.experiment_id).tags[track.NOTE_TAG]
    assert described == parent.data.tags[track.NOTE_TAG]
    assert "docs/methods/dnc.md" in described and "`below_init`" in described and "**shown**, 3 seeds" in described
    assert "Paper: Garrod, Keating: The Persistence of Neural Collapse Despite Low-Rank Bias" in described
    child = c.get_run(track.child_runs(track.Run(parent.info.run_id, parent.info.experiment_id))["K4_L1"])
    assert child.data.metrics == {"objective": 0.5, "rank": 3.0}
    table = json.loads((project / "mlartifacts" / "dnc" / parent.info.run_id / "artifacts" / "comparison.json").read_text())
    assert table["columns"] == ["variant", "objective", "rank"] and table["data"] == [["K4_L1", 0.5, 3]]
    pointer = json.loads((project / "runs" / "dnc" / "mlflow_run.json").read_text())
    assert pointer["run_id"] == parent.info.run_id
