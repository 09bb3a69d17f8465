"""One party of a PubSub-VFL run, started on its own machine from the same params files:

    # machine A (the active party: labels, top model, the coordinator and the metric)
    python -m paperline.methods.pubsub_vfl.launch --role active --profile smoke \\
        --set channels.active_host=10.0.0.1 --set channels.passive_host=10.0.0.2 --set channels.control_port=5555
    # machine B (the passive party), same overrides
    python -m paperline.methods.pubsub_vfl.launch --role passive --profile smoke \\
        --set channels.active_host=10.0.0.1 --set channels.passive_host=10.0.0.2 --set channels.control_port=5555

Each side starts its party's parameter server and workers (the same processes as the stage, over
the same channels); the passive side connects to the active side's coordinator at
active_host:control_port (either may start first), sends its ids for the alignment check and
learns the active party's channel addresses. Workers and batch size come from params (no planner:
its profile would need both parties' timings in one place). The active side prints the run's
figures as JSON; the passive side prints the test metric the active side sends back.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from paperline.config import load_method_config, read_params
from paperline.methods.pubsub_vfl.config import PubSubVFLConfig
from paperline.methods.pubsub_vfl.data import load
from paperline.methods.pubsub_vfl.parties import MODES
from paperline.methods.pubsub_vfl.train import join, run_variant


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one party of a PubSub-VFL run (see the module's docstring)")
    parser.add_argument("--role", choices=["active", "passive"], required=True)
    parser.add_argument("--profile", default=None, help="profile of pubsub_vfl (default: the one params/pubsub_vfl.yaml names)")
    parser.add_argument("--params", default="params", help="the params folder")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--variant", default="pubsub_vfl", choices=list(MODES))
    parser.add_argument("--seed", type=int, default=None, help="default: the profile's first seed")
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    _, cfg = load_method_config(PubSubVFLConfig, read_params(args.params), "pubsub_vfl", args.profile,
                                args.overrides, source=args.params)
    seed = cfg.run_seeds()[0] if args.seed is None else args.seed
    # both sides load the table from the same params and train on their own columns; the active
    # side scores the joint model on the test split, so it reads the passive test columns too
    # (as the stage does: the passive party sends its bottom model back for that)
    data = load(cfg.data)
    if args.role == "active":
        result = run_variant(cfg, data, args.variant, seed, timeout_s=args.timeout, remote_passive=True)
        out = {k: v for k, v in dataclasses.asdict(result).items() if k not in ("params", "worker_stats")}
    else:
        out = {"variant": args.variant, "seed": seed,
               "metric": join(cfg, data, args.variant, seed, timeout_s=args.timeout)}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
