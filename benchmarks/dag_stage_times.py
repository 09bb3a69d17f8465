"""Wall and CPU seconds of every DVC stage of the DAG, stage by stage, on a fresh clone of this
working tree at one profile, every stage reporting to one Prefect server (as `make run` does):

    .venv/bin/python benchmarks/dag_stage_times.py                 # tiny: what the test suite pays
    .venv/bin/python benchmarks/dag_stage_times.py --profile smoke --stages dnc tpa

A stage's cost at the tiny profile is what it adds to the suite's one `dvc repro` of the DAG (the
README's per-method budget); CPU seconds (user + sys of the stage's processes) move less with the
machine's load than wall seconds. Each stage runs as `dvc repro --single-item <stage>` in DAG order,
so DVC's own start-up (~3 s) is counted per stage, as a whole `dvc repro` counts it once.
`--temporary-servers` times the stages as they ran before `make run` shared one server: each flow
starts a temporary Prefect server of its own (no PREFECT_API_URL).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="tiny", choices=["tiny", "smoke", "paper"])
    parser.add_argument("--stages", nargs="*", help="only these (their upstream stages still run first, untimed)")
    parser.add_argument("--port", type=int, default=4251)
    parser.add_argument("--temporary-servers", action="store_true",
                        help="no shared server: each stage's flow starts a temporary one")
    args = parser.parse_args(argv)

    from flows.prefect_server import prefect_server
    from flows.progress import stage_order
    from tests.conftest import make_clone

    work = Path(tempfile.mkdtemp(prefix="dag-stage-times-"))
    clone = make_clone(work / "clone", args.profile)
    env = {k: v for k, v in os.environ.items() if k not in ("PAPERLINE_ROOT", "MLFLOW_TRACKING_URI")}
    env |= {"PATH": str(Path(sys.executable).parent) + os.pathsep + env["PATH"], "PREFECT_HOME": str(work / "prefect"),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"}
    os.environ["PREFECT_HOME"] = env["PREFECT_HOME"]
    dvc = str(Path(sys.executable).parent / "dvc")
    rows = []
    env.pop("PREFECT_API_URL", None)
    server = contextlib.nullcontext() if args.temporary_servers else prefect_server(args.port, work / "prefect-server.log")
    with server as api:
        if api:
            env["PREFECT_API_URL"] = api
        for stage in stage_order(clone, str(Path(sys.executable).parent / "dvc"), env, args.stages):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.monotonic()
            run = subprocess.run([dvc, "repro", "--single-item", stage], cwd=clone, env=env, capture_output=True,
                                 text=True)
            wall = time.monotonic() - started
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            if run.returncode != 0:
                print(run.stdout[-3000:], run.stderr[-3000:], file=sys.stderr)
                raise SystemExit(f"stage {stage} failed")
            timed = not args.stages or stage in args.stages
            if timed:
                rows.append((stage, wall, cpu))
                print(f"{stage:26s} {wall:7.1f} s wall {cpu:7.1f} s CPU", flush=True)
    print(f"{'total':26s} {sum(r[1] for r in rows):7.1f} s wall {sum(r[2] for r in rows):7.1f} s CPU "
          f"({args.profile}, {len(rows)} stages, {'temporary servers' if args.temporary_servers else 'one shared server'}, load average {os.getloadavg()[0]:.1f} at the end)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
