"""Compare a workspace's results/*.json with those committed at a git ref: per method, the non-timing
figures that differ (the kill-and-resume benchmark's `differing_keys`) and the verdicts that moved.
What "one `make run` reproduces every figure of the previous committed run" is checked with.

    .venv/bin/python benchmarks/compare_runs.py /path/to/clone [--ref HEAD]"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.kill_resume import differing_keys  # noqa: E402


def committed(ref: str, name: str) -> dict | None:
    shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:results/{name}"], capture_output=True, text=True)
    return json.loads(shown.stdout) if shown.returncode == 0 else None


def verdicts(record: dict) -> dict[str, str]:
    return {c["name"]: c.get("verdict") for c in record.get("claims", [])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workspace", type=Path, help="a clone after `make run`")
    parser.add_argument("--ref", default="HEAD", help="the commit whose results/ it is compared with")
    args = parser.parse_args(argv)
    same = common = 0
    for path in sorted((args.workspace / "results").glob("*.json")):
        old, new = committed(args.ref, path.name), json.loads(path.read_text())
        if old is None:
            print(f"{path.stem}: not in {args.ref}")
            continue
        keys = differing_keys(old, new)
        before, after = verdicts(old), verdicts(new)
        moved = {n: (before.get(n), after.get(n)) for n in dict.fromkeys([*before, *after])
                 if before.get(n) != after.get(n)}
        shared = set(before) & set(after)
        common += len(shared)
        same += sum(before[n] == after[n] for n in shared)
        print(f"{path.stem}: {len(keys)} figures differ{' (' + ', '.join(keys[:3]) + ' ...)' if keys else ''}; "
              f"verdicts moved: {moved or 'none'}")
    print(f"verdicts equal: {same} of {common} claims in both")
    return 0


if __name__ == "__main__":
    sys.exit(main())
