"""`make run`'s view of `dvc repro`: one line per stage as it starts and as it ends, with the time
left estimated from the stage times of the last run, instead of every flow's log (those go to a
log file, whose tail is printed when a stage fails):

    python -m flows.progress -- dvc repro

    [12/31] tpa ... done in 1:14 (elapsed 14:02, about 21 min left)

The stage times of the run are kept in `runs/stage_times.json` (committed with the run's outputs,
so a fresh clone's first `make run` has an estimate too).
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

STAGE_STARTS = re.compile(r"^Running stage '([^']+)'")
STAGE_SKIPPED = re.compile(r"^Stage '([^']+)' didn't change, skipping")
TIMES_PATH = Path("runs/stage_times.json")
LOG_PATH = Path(".ui/make-run.log")
MLFLOW_UI = "http://127.0.0.1:5000/#/experiments?workflowType=machine_learning"


def clock(seconds: float) -> str:
    """`1:14`, `1:02:03`."""
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def stage_order(root: Path, dvc: str = "dvc", env: dict | None = None, wanted: list[str] | None = None) -> list[str]:
    """The DAG's stages (or `wanted` and their upstream stages), upstream first, from `dvc dag --dot`
    topologically sorted. (`dvc repro --dry` is no plan: it stops at the first stage whose inputs
    an upstream stage has yet to make.)"""
    import networkx as nx  # a DVC dependency
    import yaml

    stages = list(yaml.safe_load((root / "dvc.yaml").read_text())["stages"])
    dot = subprocess.run([dvc, "dag", "--dot"], cwd=root, env=env, capture_output=True, text=True, check=True).stdout
    graph = nx.DiGraph()
    graph.add_nodes_from(stages)
    for line in dot.splitlines():
        if "->" in line:
            a, b = (part.strip().strip(";").strip('"') for part in line.split("->"))
            graph.add_edge(a, b)
    if wanted:
        keep = set(wanted).union(*(nx.ancestors(graph, s) for s in wanted))
        graph = graph.subgraph(keep)
    return list(nx.lexicographical_topological_sort(graph))


def minutes_left(planned: list[str], done: set[str], current: str | None, current_elapsed: float,
                 times: dict[str, float]) -> float | None:
    """Estimated seconds left: the last run's time of each stage not done yet (the current one less
    what it has run); None when a stage to come has no time on record."""
    left = 0.0
    for stage in planned:
        if stage in done:
            continue
        if stage not in times:
            return None
        left += max(times[stage] - current_elapsed, 0.0) if stage == current else times[stage]
    return left


class Progress:
    """Turns `dvc repro`'s output, line by line, into progress lines (`emit`)."""

    def __init__(self, planned: list[str], times: dict[str, float], emit=print, now=time.monotonic):
        self.planned, self.times, self.emit, self.now = planned, times, emit, now
        self.started = now()
        self.current: str | None = None
        self.current_started = 0.0
        self.done: set[str] = set()
        self.measured: dict[str, float] = {}
        self.numbers: dict[str, int] = {}

    def _index(self, stage: str) -> str:
        """`[k/n]`: the k-th stage this run started (DVC's order is its own, not the plan's) of the n
        it will run."""
        return f"[{self.numbers.setdefault(stage, len(self.numbers) + 1)}/{len(self.planned)}]"

    def _finish_current(self) -> None:
        if self.current is None:
            return
        took = self.now() - self.current_started
        self.measured[self.current] = took
        self.done.add(self.current)
        left = minutes_left(self.planned, self.done, None, 0.0, self.times | self.measured)
        estimate = f", about {left / 60:.0f} min left" if left is not None and len(self.done) < len(self.planned) else ""
        self.emit(f"{self._index(self.current)} {self.current} ... done in {clock(took)} "
                  f"(elapsed {clock(self.now() - self.started)}{estimate})")
        self.current = None

    def line(self, text: str) -> None:
        if match := STAGE_STARTS.match(text):
            self._finish_current()
            self.current, self.current_started = match.group(1), self.now()
            expected = self.times.get(self.current)
            self.emit(f"{self._index(self.current)} {self.current} ..."
                      + (f" (took {clock(expected)} last time)" if expected is not None else ""))
        elif (match := STAGE_SKIPPED.match(text)) and match.group(1) in self.planned:
            self.planned.remove(match.group(1))  # up to date: not part of this run's count

    def close(self, ok: bool) -> None:
        if ok:
            self._finish_current()
        self.emit(f"dvc repro {'finished' if ok else 'FAILED'} after {clock(self.now() - self.started)}"
                  + (f" in stage {self.current}" if not ok and self.current else ""))


def read_times(path: Path) -> dict[str, float]:
    try:
        return {k: float(v) for k, v in json.loads(path.read_text()).items()}
    except (FileNotFoundError, ValueError, AttributeError):
        return {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flows.progress", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log", type=Path, default=LOG_PATH, help="the command's whole output (default: %(default)s)")
    parser.add_argument("--times", type=Path, default=TIMES_PATH, help="stage times (default: %(default)s)")
    parser.add_argument("--stages", nargs="*", help="the stages the command may run (default: every stage of the DAG, "
                                                  "each dropped from the count when DVC finds it up to date)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- dvc repro [...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    times = read_times(args.times)
    planned = args.stages if args.stages is not None else stage_order(Path.cwd(), dvc=command[0])
    print(f"{len(planned)} stages in the DAG, those up to date skipped; every flow's output in {args.log}; "
          f"MLflow: `make ui`, then {MLFLOW_UI}", flush=True)
    progress = Progress(planned, times, emit=lambda text: print(text, flush=True))
    args.log.parent.mkdir(parents=True, exist_ok=True)
    with args.log.open("w") as log:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        for text in process.stdout:
            log.write(text)
            log.flush()  # a user follows the log with `tail -f`
            progress.line(text)
        code = process.wait()
    progress.close(code == 0)
    if progress.measured:
        from paperline.io import write_json

        write_json(args.times, dict(sorted((times | progress.measured).items())))
    if code != 0:
        tail = args.log.read_text().splitlines()[-40:]
        print("\n".join(["--- the last lines of the output ---", *tail]), file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
