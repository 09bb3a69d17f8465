"""Kill each method stage at a random point, resume it, and compare its figures with an
uninterrupted run (issue 42, item 3), on a fresh clone of this working tree at the tiny profile,
every stage reporting to one Prefect server:

    .venv/bin/python benchmarks/kill_resume.py                          # all nineteen methods
    .venv/bin/python benchmarks/kill_resume.py --stages dnc codemerge --seed 1
    .venv/bin/python benchmarks/kill_resume.py --stages dnc --kill-at 0.5

Per method: upstream stages run first, once, untimed; then (1) `dvc repro --single-item <m>`,
uninterrupted, its results/<m>.json kept, the run directory's record (models/<m>/run.json) watched
for when the flow opened its run and when that run completed; (2) `dvc repro --force --single-item
<m>` (DVC removes the method's uncached outputs; the flow clears models/<m>, whose run completed),
its whole process group SIGKILLed at a seeded random point in [20%, 90%] of (1)'s open-to-complete
time after (2)'s flow opened its run, so the kill lands inside the flow's work; (3) `dvc repro
--single-item <m>` again, the resume, to completion. Verdict: `identical` (every non-timing figure
of the two results records equal, exactly), `nondeterministic` (it differs, but only in figures in
which a second uninterrupted run differs from the first too: the method moves from run to run),
`differing` (the first keys that differ) or `failing` (the resume failed: its last output lines). Processes a flow starts in sessions of their own (Ray's)
outlive the kill.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# Keys whose values are measured times or follow from them (a key word, `_`-separated; `measured_`
# names what is fitted to the machine's timings, as PubSub-VFL's cost model), and the MLflow and
# git ids: a resumed run cannot repeat them and need not.
TIMING_KEY = re.compile(r"(^|_)(s|ms|seconds|time|times|wall|speed|speedup|throughput|cpu|idle|busy|wait|"
                        r"utilisation|measured)(_|$)"
                        # ratios of measured times named otherwise (model_shapley, pubsub_vfl's planner)
                        r"|(^|_)(estimator_over_train_step|planner_vs_grid_optimum|pick_over_best)$")
# ... and an error's text (a dropped client's `reason` names Ray's worker and lease by id)
ID_KEY = re.compile(r"run_id|parent_run|git_commit|mlflow|experiment_id|(^|_)reason$")


def _skipped(key: str) -> bool:
    return bool(TIMING_KEY.search(key) or ID_KEY.search(key))


def differing_keys(a: Any, b: Any, path: str = "") -> list[str]:
    """The paths (`rows/K4_L1/nc1`, `claims/2/effect`) at which two JSON records differ, timing and
    id keys left out, as are claims about a timing metric (a dict whose `metric` names one)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if any(isinstance(d.get("metric"), str) and _skipped(d["metric"]) for d in (a, b)):
            return []
        keys = [k for k in dict.fromkeys([*a, *b]) if not _skipped(str(k))]
        return [p for k in keys for p in (differing_keys(a.get(k), b.get(k), f"{path}/{k}") if k in a and k in b
                                          else [f"{path}/{k}"])]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}[len {len(a)} vs {len(b)}]"]
        return [p for i, (x, y) in enumerate(zip(a, b)) for p in differing_keys(x, y, f"{path}/{i}")]
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return []  # a figure undefined in both runs (STAR's paper score of the offline data) is the same
    return [] if a == b and type(a) is type(b) else [path or "/"]


def verdict(uninterrupted: dict, resumed: dict | None, resume_output: str, shown: int = 3,
            rerun: dict | None = None) -> tuple[str, str]:
    """(`identical` | `nondeterministic` | `differing` | `failing`, detail) for one method; `resumed`
    is None when the resume failed or wrote no results record. `rerun`, a second uninterrupted run's
    record: a resume that differs only where the two uninterrupted runs differ too is
    `nondeterministic` (the method's figures move from run to run, kill or no kill: PubSub-VFL's
    asynchronous parties)."""
    if resumed is None:
        return "failing", " / ".join(line.strip() for line in resume_output.strip().splitlines()[-3:])
    keys = differing_keys(uninterrupted, resumed)
    if not keys:
        return "identical", ""
    if rerun is not None and set(keys) <= set(moving := differing_keys(uninterrupted, rerun)):
        return "nondeterministic", (f"differs in {len(keys)} figures ({', '.join(keys[:shown])}"
                                    f"{f' +{len(keys) - shown} more' if len(keys) > shown else ''}), all among "
                                    f"the {len(moving)} in which two uninterrupted runs differ")
    return "differing", ", ".join(keys[:shown]) + (f" (+{len(keys) - shown} more)" if len(keys) > shown else "")


POLL_S = 0.1  # how often the run directory's record is read while a stage runs


def _run(command: list[str], cwd: Path, env: dict[str, str], log: Path,
         models: Path | None = None) -> tuple[int, float, float | None, float | None]:
    """Run `command` to its end, its output in `log`: (exit code, wall s, s when its flow opened a run,
    s when that run completed), the two from `models`' run-directory record (None where never seen)."""
    before, opened, completed = (run_state(models) if models else None), None, None
    started = time.monotonic()
    with open(log, "w") as out:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        while process.poll() is None:
            state, now = (run_state(models) if models else None), time.monotonic() - started
            if state is not None and state != before and opened is None:
                opened = now
            if opened is not None and state is not None and state.get("complete") and completed is None:
                completed = now
            time.sleep(POLL_S)
    return process.returncode, time.monotonic() - started, opened, completed


def _killed(command: list[str], cwd: Path, env: dict[str, str], log: Path, after: float,
            models: Path | None = None) -> bool:
    """Run `command` in a session of its own and SIGKILL its process group `after` seconds in
    (with `models`: `after` seconds after its flow opened a new run in that run directory);
    False when it ended first."""
    before = run_state(models) if models is not None else None
    with open(log, "w") as out:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        if models is not None:  # wait for the flow to open its run (the stage may end first)
            while process.poll() is None and run_state(models) in (before, None):
                time.sleep(POLL_S)
        try:
            process.wait(timeout=after)
            return False
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return True


def run_state(models: Path) -> dict | None:
    """The run directory's record (tasks/resume.py): the MLflow parent run that owns it, and whether
    that run completed."""
    return json.loads((models / "run.json").read_text()) if (models / "run.json").is_file() else None


def killed_where(models: Path, before: dict | None) -> str:
    """How far the killed run got, from its run directory's record (`before`: the record the
    uninterrupted run left, which a killed run that opened no run of its own leaves in place)."""
    state = run_state(models)
    if state is None or state == before:
        return "killed before its flow opened a run"
    if state.get("complete"):
        return "killed after its flow completed"
    return f"resumed ({sum(p.is_file() for p in models.rglob('*')) - 1} files kept)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stages", nargs="*", help="these methods only (default: every method of flows/registry.yaml)")
    parser.add_argument("--seed", type=int, default=0, help="seeds each method's kill point")
    parser.add_argument("--kill-at", type=float, help="kill at this fraction of the uninterrupted time, for all")
    parser.add_argument("--port", type=int, default=4252)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "kill_resume.md")
    args = parser.parse_args(argv)

    from flows import METHODS
    from flows.prefect_server import prefect_server
    from flows.progress import stage_order
    from tasks.prefect_api import release_orphaned_slots
    from tests.conftest import make_clone

    methods = args.stages or list(METHODS)
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        raise SystemExit(f"not a method of flows/registry.yaml: {', '.join(unknown)}")
    work = Path(tempfile.mkdtemp(prefix="kill-resume-"))
    clone = make_clone(work / "clone", "tiny")
    env = {k: v for k, v in os.environ.items() if k not in ("PAPERLINE_ROOT", "MLFLOW_TRACKING_URI", "PREFECT_API_URL")}
    env |= {"PATH": str(Path(sys.executable).parent) + os.pathsep + env["PATH"], "PREFECT_HOME": str(work / "prefect"),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"}
    os.environ["PREFECT_HOME"] = env["PREFECT_HOME"]
    dvc = str(Path(sys.executable).parent / "dvc")
    rows = [f"kill and resume at the tiny profile, seed {args.seed}" +
            (f", killed at {args.kill_at:.0%}" if args.kill_at is not None else "") + f" ({time.strftime('%Y-%m-%d')})",
            "", "| method | kill point s (after the run opened) | uninterrupted s | resume s | verdict | detail |",
            "| --- | ---: | ---: | ---: | --- | --- |"]
    print("\n".join(rows), flush=True)
    verdicts: list[str] = []
    with prefect_server(args.port, work / "prefect-server.log") as api:
        env["PREFECT_API_URL"] = api
        for stage in stage_order(clone, dvc, env, methods):
            log = work / f"{stage}.log"
            if stage not in methods:
                rc, *_ = _run([dvc, "repro", "--single-item", stage], clone, env, log)
                if rc != 0:
                    raise SystemExit(f"stage {stage} failed (see {log}):\n{log.read_text()[-3000:]}")
                continue
            rc, wall, opened, completed = _run([dvc, "repro", "--single-item", stage], clone, env, log,
                                               clone / "models" / stage)
            if rc != 0:
                raise SystemExit(f"stage {stage} failed uninterrupted (see {log}):\n{log.read_text()[-3000:]}")
            results = clone / "results" / f"{stage}.json"
            uninterrupted = json.loads(results.read_text())
            fraction = args.kill_at if args.kill_at is not None else random.Random(f"{args.seed}:{stage}").uniform(0.2, 0.9)
            # the kill lands inside the flow's run: at `fraction` of the time from its opening to its
            # completion in the uninterrupted run (of the whole stage where the record showed neither)
            inside = opened is not None and completed is not None
            kill_at = fraction * (completed - opened if opened is not None and completed is not None else wall)
            before = run_state(clone / "models" / stage)
            killed = _killed([dvc, "repro", "--force", "--single-item", stage], clone, env,
                             work / f"{stage}.killed.log", kill_at, clone / "models" / stage if inside else None)
            # The killed run's `gpu` slot would stay taken until its lease expires (up to 75 s,
            # tasks/runners.py); nothing else runs on this server now, so every taken slot is its.
            release_orphaned_slots(api)
            how = killed_where(clone / "models" / stage, before) if killed else "not killed: it ended first"
            resume_log = work / f"{stage}.resume.log"
            rc, resume_wall, *_ = _run([dvc, "repro", "--single-item", stage], clone, env, resume_log)
            output = resume_log.read_text()
            resumed = json.loads(results.read_text()) if rc == 0 and results.exists() else None
            name, detail = verdict(uninterrupted, resumed, output)
            if name == "differing":  # is it the kill, or does the method move from run to run anyway?
                rc, *_ = _run([dvc, "repro", "--force", "--single-item", stage], clone, env, work / f"{stage}.rerun.log")
                if rc == 0:
                    name, detail = verdict(uninterrupted, resumed, output, rerun=json.loads(results.read_text()))
            row = f"| {stage} | {kill_at:.1f} | {wall:.1f} | {resume_wall:.1f} | {name} | {how}{'; ' + detail if detail else ''} |"
            rows.append(row)
            verdicts.append(name)
            print(row, flush=True)
    rows += ["", ", ".join(f"{verdicts.count(v)}/{len(verdicts)} {v}"
                           for v in ("identical", "nondeterministic", "differing", "failing")) +
             f" (load average {os.getloadavg()[0]:.1f} at the end)"]
    print(f"{rows[-1]}\nlogs in {work}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
