"""`python -m flows list | run <method> [--profile P] [--set key=value ...] | serve | report`."""
from __future__ import annotations

import argparse
import sys

from flows.env import set_default_env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flows", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the registered methods")
    run = sub.add_parser("run", help="run one method's flow")
    run.add_argument("method")
    run.add_argument("--profile", choices=["tiny", "smoke", "paper"], default=None,
                     help="default: the method's `profile` in params.yaml")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a key of the chosen profile (repeatable)")
    sub.add_parser("serve", help="serve every method, and the whole pipeline, as a Prefect deployment "
                                  "that runs it through DVC, with its schedule")
    sub.add_parser("report", help="gather metrics/*.json into reports/results.md and print it")
    args = parser.parse_args(argv)

    set_default_env()
    from flows import METHODS
    from paperline.config import ParamsError

    try:
        if args.command == "list":
            from flows.launch import resolve

            for name, spec in METHODS.items():
                profile, _ = resolve(name)
                print(f"{name:24s} {spec.status:10s} profile={profile:6s} {spec.title}")
        elif args.command == "run":
            from flows.launch import run_method

            run_method(args.method, args.profile, args.overrides)
        elif args.command == "serve":
            from flows.dvc_run import serve_all

            serve_all()
        elif args.command == "report":
            from paperline.report import write_report
            from tasks.paths import repo_path

            print(write_report(repo_path("metrics"), repo_path("reports", "results.md"), METHODS))
    except ParamsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
