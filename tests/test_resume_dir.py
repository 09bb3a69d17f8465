from __future__ import annotations

from tasks.resume import open_run_dir


def test_run_dir_resumes_only_an_unfinished_run_of_the_same_config(project):
    first = open_run_dir("m", {"a": 1})
    assert not first.resumed
    first.record_parent("run-1")
    (first.path / "ckpt.pt").write_text("x")

    again = open_run_dir("m", {"a": 1})  # the same config after a crash: keep checkpoints
    assert again.resumed and again.previous_parent_run == "run-1"
    assert (again.path / "ckpt.pt").exists()

    again.mark_complete()
    fresh = open_run_dir("m", {"a": 1})  # after a completed run: start afresh
    assert not fresh.resumed and not (fresh.path / "ckpt.pt").exists()

    fresh.record_parent("run-2")
    (fresh.path / "ckpt.pt").write_text("x")
    changed = open_run_dir("m", {"a": 2})  # another config: never mix checkpoints
    assert not changed.resumed and not (changed.path / "ckpt.pt").exists()
