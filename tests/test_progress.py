"""`make run`'s progress lines over `dvc repro`'s output (flows/progress.py)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from flows.progress import Progress, clock, main, minutes_left


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_one_line_per_stage_with_the_time_left_from_the_last_run():
    """Stages are counted as DVC starts them (here not in the plan's order)."""
    now, lines = Clock(), []
    progress = Progress(["tpa", "text-corpus", "report"], {"text-corpus": 60, "tpa": 120, "report": 5},
                        emit=lines.append, now=now)
    progress.line("Running stage 'text-corpus':\n")
    now.t = 50
    progress.line("> python -m flows run text-corpus\n")  # a flow's output: no line of its own
    progress.line("Running stage 'tpa':\n")
    now.t = 170
    progress.line("Running stage 'report':\n")
    now.t = 171
    progress.close(ok=True)
    assert lines == [
        "[1/3] text-corpus ... (took 1:00 last time)",
        "[1/3] text-corpus ... done in 0:50 (elapsed 0:50, about 2 min left)",
        "[2/3] tpa ... (took 2:00 last time)",
        "[2/3] tpa ... done in 2:00 (elapsed 2:50, about 0 min left)",
        "[3/3] report ... (took 0:05 last time)",
        "[3/3] report ... done in 0:01 (elapsed 2:51)",
        "dvc repro finished after 2:51"]


def test_estimates_need_every_stage_to_come_on_record():
    assert minutes_left(["a", "b"], set(), "a", 10.0, {"a": 30, "b": 60}) == 80.0
    assert minutes_left(["a", "b"], {"a"}, None, 0.0, {"a": 30}) is None
    assert clock(3723) == "1:02:03" and clock(74) == "1:14"


def test_main_logs_the_output_keeps_the_times_and_shows_the_tail_of_a_failure(tmp_path, capsys):
    fake_dvc = tmp_path / "fake_dvc.py"
    fake_dvc.write_text(
        "import sys\n"
        "print(\"Stage 'prep' didn't change, skipping\")\n"
        "print(\"Running stage 'train':\")\n"
        "print('> python -m flows run train')\n"
        "print('Traceback: boom')\n"
        "sys.exit(int(sys.argv[1]))\n")
    times, log = tmp_path / "runs" / "stage_times.json", tmp_path / "run.log"
    stages = ["--stages", "prep", "train"]
    assert main(["--log", str(log), "--times", str(times), *stages, "--", sys.executable, str(fake_dvc), "0"]) == 0
    out = capsys.readouterr().out  # prep is up to date: dropped from the count
    assert out.startswith("2 stages in the DAG") and "[1/1] train ... done in" in out and "Traceback" not in out
    assert "Traceback: boom" in log.read_text() and set(json.loads(times.read_text())) == {"train"}
    assert main(["--log", str(log), "--times", str(times), *stages, "--", sys.executable, str(fake_dvc), "3"]) == 3
    captured = capsys.readouterr()
    assert "dvc repro FAILED after" in captured.out and "in stage train" in captured.out
    assert "Traceback: boom" in captured.err  # the log's tail where the user looks


def test_the_dag_order_puts_upstream_stages_first(tmp_path):
    """`stage_order` on this project's dvc.yaml: every prep stage before the methods that read it."""
    from flows.progress import stage_order
    from tests.conftest import CHECKOUT

    order = stage_order(CHECKOUT, dvc=str(Path(sys.executable).parent / "dvc"))
    assert order.index("text-corpus") < order.index("lm-base") < order.index("leff") and order[-1] == "report"
    assert stage_order(CHECKOUT, dvc=str(Path(sys.executable).parent / "dvc"), wanted=["tpa"]) == ["text-corpus", "tpa"]
