"""MLflow tracking: experiment per method, parent and child runs, tags, FAILED on failure."""
from __future__ import annotations

import pytest

from tasks import track


def test_parent_and_child_runs_carry_the_tags_and_end_finished(project):
    with track.parent_run("m", "tiny", {"lam": 0.1, "grid": {"K": [4]}}, "generated") as parent:
        with track.child_run(parent, "m", "v1", "tiny", "generated", params={"K": 4}) as child:
            child.log_history("loss", [0, 1, 2], [3.0, 2.0, 1.0])
            child.log_metrics({"final": 1.0, "skip_me": "text"})
    c = track.client()
    exp = c.get_experiment_by_name("m")
    assert exp.artifact_location == (project / "mlartifacts" / "m").as_uri()
    p, ch = c.get_run(parent.run_id), c.get_run(child.run_id)
    assert p.info.status == ch.info.status == "FINISHED"
    for run, variant in [(p, "all"), (ch, "v1")]:
        assert {k: run.data.tags[k] for k in ("method", "variant", "profile", "data_version")} == {
            "method": "m", "variant": variant, "profile": "tiny", "data_version": "generated"}
        assert len(run.data.tags["git_commit"]) in (40, len("unknown"))
    assert ch.data.tags["mlflow.parentRunId"] == parent.run_id
    assert p.data.params == {"lam": "0.1", "grid.K": "[4]"}
    assert [m.value for m in c.get_metric_history(child.run_id, "loss")] == [3.0, 2.0, 1.0]
    assert ch.data.metrics == {"loss": 1.0, "final": 1.0}


def test_a_failing_block_marks_its_runs_failed(project):
    with pytest.raises(RuntimeError):
        with track.parent_run("m", "tiny", {}, "generated") as parent:
            with track.child_run(parent, "m", "v1", "tiny", "generated") as child:
                raise RuntimeError("diverged")
    c = track.client()
    assert c.get_run(parent.run_id).info.status == "FAILED"
    assert c.get_run(child.run_id).info.status == "FAILED"


def test_a_run_left_running_by_a_killed_process_is_failed_on_resume(project):
    c = track.client()
    exp = track.experiment_id("m")
    parent = c.create_run(exp).info.run_id
    child = c.create_run(exp, tags={"mlflow.parentRunId": parent}).info.run_id
    assert track.fail_if_running(parent)
    assert c.get_run(parent).info.status == c.get_run(child).info.status == "FAILED"
    assert not track.fail_if_running(parent)  # already ended


def test_data_version_hashes_input_files(project):
    assert track.data_version() == "generated"
    (project / "data").mkdir()
    (project / "data" / "a.txt").write_text("one")
    v1 = track.data_version([project / "data"])
    (project / "data" / "a.txt").write_text("two")
    assert v1.startswith("sha256:") and track.data_version([project / "data"]) != v1
