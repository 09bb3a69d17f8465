"""MLflow tracking: experiment per method (a training-runs experiment), parent and child runs,
tags (git state included), the data version as a dataset, FAILED on failure, no quiet failures."""
from __future__ import annotations

import subprocess

import pytest

from tasks import track


def _context(parent: track.Run) -> track.RunContext:
    return track.RunContext("m", "tiny", "generated", parent)


def test_parent_and_child_runs_carry_the_tags_and_end_finished(project):
    with track.parent_run("m", "tiny", {"lam": 0.1, "grid": {"K": [4]}}, "generated") as parent:
        with _context(parent).child("v1", params={"K": 4}) as child:
            child.log_history("loss", [0, 1, 2], [3.0, 2.0, 1.0])
            child.log_metrics({"final": 1.0, "skip_me": "text"})
    c = track.client()
    exp = c.get_experiment_by_name("m")
    assert exp.artifact_location == (project / "mlartifacts" / "m").as_uri()  # beside mlflow.db
    assert exp.tags[track.EXPERIMENT_KIND_TAG] == "custom_model_development"
    p, ch = c.get_run(parent.run_id), c.get_run(child.run_id)
    assert p.info.status == ch.info.status == "FINISHED"
    for run, variant in [(p, "all"), (ch, "v1")]:
        assert {k: run.data.tags[k] for k in ("method", "variant", "profile", "data_version")} == {
            "method": "m", "variant": variant, "profile": "tiny", "data_version": "generated"}
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=track.code_root(), capture_output=True,
                              text=True).stdout.strip()
        assert run.data.tags["git_commit"] == head and run.data.tags["git_dirty"] in ("true", "false")
        assert [(d.dataset.name, d.dataset.digest) for d in run.inputs.dataset_inputs] == [("m-inputs", "generated")]
    assert ch.data.tags["mlflow.parentRunId"] == parent.run_id
    assert p.data.params == {"lam": "0.1", "grid.K": "[4]"}
    assert [m.value for m in c.get_metric_history(child.run_id, "loss")] == [3.0, 2.0, 1.0]
    assert ch.data.metrics == {"loss": 1.0, "final": 1.0}
    assert track.child_runs(parent) == {"v1": child.run_id}


def test_git_dirty_names_changed_code_but_not_run_outputs(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    (repo / "metrics").mkdir(parents=True)
    (repo / "code.py").write_text("a = 1\n")
    (repo / "metrics" / "m.json").write_text("{}\n")
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    monkeypatch.setattr(track, "code_root", lambda: repo)
    track.git_state.cache_clear()
    try:
        (repo / "metrics" / "m.json").write_text('{"a": 1}\n')  # a run's output: still clean
        assert track.git_state()["git_dirty"] == "false"
        track.git_state.cache_clear()
        (repo / "code.py").write_text("a = 2\n")
        state = track.git_state()
        assert state["git_dirty"] == "true" and state["git_dirty_paths"] == "code.py"
        track.git_state.cache_clear()
        monkeypatch.setattr(track, "code_root", lambda: tmp_path)  # a source tarball: said, not failed
        assert track.git_state() == {"git_commit": "not a git checkout", "git_dirty": "unknown"}
    finally:
        track.git_state.cache_clear()


def test_a_failing_block_marks_its_runs_failed(project):
    with pytest.raises(RuntimeError):
        with track.parent_run("m", "tiny", {}, "generated") as parent:
            with _context(parent).child("v1") as child:
                raise RuntimeError("diverged")
    c = track.client()
    assert c.get_run(parent.run_id).info.status == "FAILED"
    assert c.get_run(child.run_id).info.status == "FAILED"


def test_a_run_left_running_by_a_killed_process_is_failed_on_resume(project):
    c = track.client()
    exp = track.experiment_id("m")
    parent = c.create_run(exp).info.run_id
    child = c.create_run(exp, tags={"mlflow.parentRunId": parent}).info.run_id
    grandchild = c.create_run(exp, tags={"mlflow.parentRunId": child}).info.run_id
    assert track.fail_if_running(parent)
    assert {c.get_run(r).info.status for r in (parent, child, grandchild)} == {"FAILED"}
    assert not track.fail_if_running(parent)  # already ended
    with pytest.warns(UserWarning, match="not in the tracking store"):
        assert not track.fail_if_running("0" * 32)


def test_data_version_hashes_contents_and_refuses_missing_inputs(project):
    assert track.data_version() == "generated"
    (project / "data").mkdir()
    (project / "data" / "a.txt").write_text("one")
    v1 = track.data_version([project / "data"])
    (project / "data" / "a.txt").write_text("two")  # same size: the content decides
    assert v1.startswith("sha256:") and track.data_version([project / "data"]) != v1
    with pytest.raises(FileNotFoundError, match="no/such.bin: input missing"):
        track.data_version([project / "data", project / "no" / "such.bin"])


def test_large_inputs_are_read_once_then_known_by_size_and_mtime(project, monkeypatch):
    import os

    from paperline import io

    shard = project / "shard.bin"
    shard.write_bytes(b"\0" * io.CACHE_MIN_BYTES)
    reads = []
    real = io.sha256_file
    monkeypatch.setattr(io, "sha256_file", lambda p: reads.append(p) or real(p))
    first = track.data_version([shard])
    assert track.data_version([shard]) == first and len(reads) == 1  # the second run used the cache
    with open(shard, "r+b") as f:
        f.write(b"\1")
    os.utime(shard, ns=(shard.stat().st_atime_ns, shard.stat().st_mtime_ns + 10**9))
    assert track.data_version([shard]) != first and len(reads) == 2


def test_final_values_land_at_the_end_of_an_existing_curve(project):
    with track.parent_run("m", "tiny", {}, "generated") as parent:
        with _context(parent).child("v1") as child:
            child.log_history("val_loss", [10, 20], [3.0, 2.0])
    child.log_final({"val_loss": 1.5, "params": 7})
    c = track.client()
    assert [(m.step, m.value) for m in c.get_metric_history(child.run_id, "val_loss")] == [(10, 3.0), (20, 2.0), (20, 1.5)]
    assert c.get_run(child.run_id).data.metrics == {"val_loss": 1.5, "params": 7.0}


def test_the_verdicts_figures_land_on_each_methods_run_and_on_a_report_run(project, tmp_path):
    import json

    with track.parent_run("m", "tiny", {}, "generated") as parent:
        pass
    reports = tmp_path / "reports"
    (reports / "verdicts").mkdir(parents=True)
    for name in ("verdicts.png", "results.md", "verdicts/m.png", "verdicts/gone.png"):
        (reports / name).write_bytes(b"x")
    pointers = {"m": tmp_path / "m.json", "gone": tmp_path / "gone.json", "unrun": tmp_path / "unrun.json"}
    pointers["m"].write_text(json.dumps({"run_id": parent.run_id}))
    pointers["gone"].write_text(json.dumps({"run_id": "0" * 32}))  # a run another store holds
    with pytest.warns(UserWarning, match=r"gone.json: run 0{32} is not in .*its verdicts figure stays in"):
        report_run = track.log_verdicts(reports, ["m", "gone", "unrun"], pointers.__getitem__)
    c = track.client()
    assert [a.path for a in c.list_artifacts(parent.run_id, "verdicts")] == ["verdicts/m.png"]
    assert sorted(a.path for a in c.list_artifacts(report_run)) == ["results.md", "verdicts.png"]
    run = c.get_run(report_run)
    assert run.info.status == "FINISHED" and c.get_experiment(run.info.experiment_id).name == "report"
    assert "95% interval" in run.data.tags[track.NOTE_TAG]
    # the report's and MLflow's Default experiments say what they are (the UI's Description column); a
    # method's own is described by its flow (tests/test_skeleton.py)
    assert {e.name for e in c.search_experiments() if not e.tags.get(track.NOTE_TAG)} == {"m"}
