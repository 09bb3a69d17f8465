"""How long a GPU task waits for its `gpu` concurrency slot on a Prefect server with its task-run
recorder on (Prefect's default, `make ui`'s server) against one with it off (the servers this
project starts for `make run` and the test session; flows/env.py TASK_RUN_RECORDER says why):

    .venv/bin/python benchmarks/slot_wait.py [--tasks 10] [--work 1.0]

Each server runs the same trivial flow: `--tasks` tasks on the thread runner (2 workers), each
holding a slot (tasks/runners.py `gpu_slot`) for `--work` seconds of sleep. Prints the mean time a
slot request takes (every one the flow makes: the task engine's for the `gpu` tag and gpu_slot's),
the flow's wall time and the ratios recorder-on / recorder-off.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def run_flow(tasks: int, work: float) -> dict:
    """In this process (its PREFECT_API_URL set by the caller): the flow, with each slot request timed."""
    import prefect.client.orchestration._concurrency_limits.client as limits
    from prefect import flow, task
    from prefect.task_runners import ThreadPoolTaskRunner

    from tasks.runners import GPU_TAG, ensure_gpu_limit, gpu_slot

    waits: list[float] = []
    request = limits.ConcurrencyLimitAsyncClient.increment_concurrency_slots_with_lease

    async def timed(self, *args, **kwargs):
        started = time.monotonic()
        try:
            return await request(self, *args, **kwargs)
        finally:
            waits.append(time.monotonic() - started)

    limits.ConcurrencyLimitAsyncClient.increment_concurrency_slots_with_lease = timed

    @task(tags=[GPU_TAG])
    def hold(index: int) -> int:
        with gpu_slot():
            time.sleep(work)
        return index

    @flow(task_runner=ThreadPoolTaskRunner(max_workers=2))
    def slots() -> None:
        ensure_gpu_limit()
        for future in [hold.submit(i) for i in range(tasks)]:
            future.result()

    started = time.monotonic()
    slots()
    return {"wall_s": time.monotonic() - started, "requests": len(waits), "mean_wait_s": statistics.mean(waits)}


def measure(recorder: bool, tasks: int, work: float, work_dir: Path) -> dict:
    from flows.env import TASK_RUN_RECORDER
    from flows.prefect_server import free_port, prefect_server

    env = os.environ | {"PREFECT_HOME": str(work_dir / f"prefect-{recorder}"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                        "DO_NOT_TRACK": "1", TASK_RUN_RECORDER: str(recorder).lower()}
    with prefect_server(free_port(), work_dir / f"server-{recorder}.log", env=env) as url:
        out = subprocess.run([sys.executable, __file__, "--flow", "--tasks", str(tasks), "--work", str(work)],
                             env=env | {"PREFECT_API_URL": url, "PREFECT_LOGGING_LEVEL": "WARNING"},
                             capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--work", type=float, default=1.0, help="seconds each task holds its slot")
    parser.add_argument("--flow", action="store_true", help=argparse.SUPPRESS)  # the measured process
    args = parser.parse_args()
    if args.flow:
        print(json.dumps(run_flow(args.tasks, args.work)))
        return
    with tempfile.TemporaryDirectory(prefix="slot-wait-") as tmp:
        results = {recorder: measure(recorder, args.tasks, args.work, Path(tmp)) for recorder in (True, False)}
    for recorder, r in results.items():
        print(f"task-run recorder {'on ' if recorder else 'off'}: {r['requests']} slot requests, "
              f"mean {r['mean_wait_s']:.2f} s each; flow {r['wall_s']:.1f} s "
              f"({args.tasks} tasks x {args.work:g} s of work on 2 threads)")
    on, off = results[True], results[False]
    print(f"ratio on/off: slot request {on['mean_wait_s'] / off['mean_wait_s']:.0f}x, flow {on['wall_s'] / off['wall_s']:.2f}x")


if __name__ == "__main__":
    main()
