"""`python -m flows list | run <method or prep stage> [--profile P] [--set key=value ...] | serve | report | new <method>`.

`run` exits 0 when done, 2 on invalid parameters (the message names the key) or bad input data
(the message names the file, line or field: checked in the flow's data step, before any output is
touched), 1 when the work itself fails. Outside DVC a method's run writes its outputs to a
scratch folder (`scratch/<method>-<time>/`, printed), not the workspace's versioned ones; `--in-place`
writes those, with the params files' parameters only (else exit 2 and the `dvc exp run` that does it)."""
from __future__ import annotations

import argparse
import sys

from flows.env import set_default_env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flows", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the registered methods and data-prep stages")
    run = sub.add_parser("run", help="run one method's or data-prep stage's flow")
    run.add_argument("method", metavar="name", help="a method or a data-prep stage (python -m flows list)")
    run.add_argument("--profile", choices=["tiny", "smoke", "paper"], default=None,
                     help="default: the method's `profile` in params/<method>.yaml")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a key of the chosen profile (repeatable)")
    where = run.add_mutually_exclusive_group()
    where.add_argument("--in-place", action="store_true",
                       help="write the workspace's versioned outputs (as `dvc repro` would): only with the "
                            "profile params/<method>.yaml names and no --set")
    where.add_argument("--out", metavar="DIR", default=None,
                       help="a method's outputs go under DIR (default: a new scratch/<method>-<time>/); "
                            "a killed run's folder resumes from its checkpoints")
    sub.add_parser("serve", help="serve every method, and the whole pipeline, as a Prefect deployment "
                                  "that runs it through DVC, with its schedule")
    report = sub.add_parser("report", help="gather results/*.json into reports/results.md and print it")
    report.add_argument("--docs", action="store_true",
                        help="also rewrite README.md's methods block (verdicts per method) and each method "
                             "page's claims table (docs/methods/<method>.md) from results/*.json")
    new = sub.add_parser("new", help="write a new method's files from the skeleton (docs/contributing.md)")
    new.add_argument("new_method", metavar="method", help="its name: a lowercase identifier no stage has")
    new.add_argument("--title", default=None, help="its title in flows/registry.yaml and its page")
    args = parser.parse_args(argv)

    set_default_env()
    from flows import METHODS, PREP_STAGES
    from paperline.config import ParamsError
    from paperline.io import DataError

    try:
        if args.command == "list":
            from flows.launch import resolve

            for name, spec in METHODS.items():
                profile, _ = resolve(name)
                print(f"{name:24s} {spec.status:10s} profile={profile:6s} {spec.title}")
            from flows.prep import resolve_prep

            for name, spec in PREP_STAGES.items():
                profile, _ = resolve_prep(name)
                print(f"{name:24s} {'prep':10s} profile={profile or '-':6s} {spec.title}")
        elif args.command == "run" and args.method not in METHODS and args.method not in PREP_STAGES:
            raise ParamsError(f"unknown method or prep stage {args.method!r}; methods: {', '.join(METHODS)}; "
                              f"prep stages: {', '.join(PREP_STAGES)}")
        elif args.command == "run" and args.method in PREP_STAGES:
            from flows.prep import run_prep

            if args.out:  # the methods read a stage's data from the workspace
                raise ParamsError(f"--out: {args.method} is a data-prep stage; it writes the workspace's data")
            run_prep(args.method, args.profile, args.overrides)
        elif args.command == "run":
            from flows.launch import cli_outputs, describe_outputs, run_method

            outputs = cli_outputs(args.method, args.profile, args.overrides, args.in_place, args.out)
            if outputs is not None:
                print(describe_outputs(outputs), flush=True)  # a killed run's --out
            run_method(args.method, args.profile, args.overrides, outputs)
            if outputs is not None:
                print(describe_outputs(outputs))
        elif args.command == "serve":
            from flows.dvc_run import serve_all

            serve_all()
        elif args.command == "report":
            from paperline.report import read_records, write_report
            from tasks.paths import repo_path, run_pointer_path
            from tasks.track import log_verdicts

            records = read_records(repo_path("results"), METHODS)  # read and validated once
            print(write_report(records, repo_path("reports", "results.md"), METHODS))
            log_verdicts(repo_path("reports"), METHODS, run_pointer_path)  # the figures in MLflow too
            if args.docs:
                from paperline.report import page_claims, readme_methods, update_page, update_readme

                update_readme(repo_path("README.md"), readme_methods(records, METHODS))
                for name, record in records.items():
                    update_page(repo_path("docs", "methods", f"{name}.md"), page_claims(record))
                print("README.md's methods block and each page's claims table rewritten")
        elif args.command == "new":
            from flows.new_method import new_method
            from tasks.paths import code_root

            print("\n".join(["written:", *new_method(args.new_method, code_root(), args.title)]))
    except ParamsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except (DataError, FileNotFoundError) as err:  # a bad input: refused before any output is touched
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
