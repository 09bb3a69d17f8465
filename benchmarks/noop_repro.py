"""How long a no-op `dvc repro` takes after a complete run (issue 38's budget: at most 5 s).

    .venv/bin/python benchmarks/noop_repro.py [--repeat 3] [--profile out.prof]

A scratch clone of the checkout (`git clone`, the checkout's DVC cache via `dvc cache dir --local`,
`dvc checkout`), its lock brought up to date with the tree by `dvc commit -f` (nothing re-runs:
the committed outputs are taken as the current code's), then `dvc repro` and `dvc status` timed
`--repeat` times each, the best of them printed; `--profile` writes DVC's own cProfile of one more
`dvc repro` (`dvc --cprofile-dump`; read it with `python -m pstats` or snakeviz)."""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent
DVC = str(Path(sys.executable).parent / "dvc")


def timed(cmd: list[str], cwd: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0 or "Running stage" in done.stdout:
        raise SystemExit(f"{' '.join(cmd)} is not a no-op here:\n{done.stdout}{done.stderr}")
    return elapsed


def scratch_clone(into: Path) -> Path:
    clone = into / "clone"
    subprocess.run(["git", "clone", "-q", str(CHECKOUT), str(clone)], check=True)
    for step in (["cache", "dir", "--local", str(CHECKOUT / ".dvc" / "cache")], ["checkout", "-q"],
                 ["commit", "-f", "-q"]):
        subprocess.run([DVC, *step], cwd=clone, check=True, capture_output=True)
    return clone


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", type=Path, default=None, help="write a cProfile of one more dvc repro here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="noop-repro-") as tmp:
        clone = scratch_clone(Path(tmp))
        timed([DVC, "repro"], clone)  # the first fills DVC's state db (file hashes by inode and mtime)
        repro = [timed([DVC, "repro"], clone) for _ in range(args.repeat)]
        status = [timed([DVC, "status"], clone) for _ in range(args.repeat)]
        print(f"no-op dvc repro: {min(repro):.2f} s (best of {args.repeat}: {', '.join(f'{t:.2f}' for t in repro)})")
        print(f"dvc status:      {min(status):.2f} s (best of {args.repeat}: {', '.join(f'{t:.2f}' for t in status)})")
        if args.profile:
            timed([DVC, "--cprofile-dump", str(args.profile.resolve()), "repro"], clone)
            print(f"cProfile of one dvc repro: {args.profile}")


if __name__ == "__main__":
    main()
