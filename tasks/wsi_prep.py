"""`python -m tasks.wsi_prep cohort|downsample|til-maps [--profile P] [--set key=value ...]`: the
shared WSI data-prep stages of dvc.yaml (wsi-cohort, wsi-downsample, til-maps).

Parameters: `wsi.profiles.<profile>` in params.yaml, validated into WSIPrepConfig before any
work. The profile is the one `ztsurv.profile` names (the method that reads these data), so one
switch sets data and model scale together; `--profile` overrides it. Outputs go under
<project>/data/wsi/ (PAPERLINE_ROOT, as everywhere); the texture slide is read from
<project>/data/raw/. Plain processes, no Prefect: DVC decides when they re-run.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, Sequence

from paperline.config import PROFILES, ParamsError, load_data_config, read_params
from paperline.data.wsi_prep import WSIPrepConfig
from tasks.paths import params_path, repo_path

SECTION = "wsi"
FOLLOWS = "ztsurv"  # whose `profile` picks the data profile


def data_dir():
    return repo_path("data", "wsi")


def raw_dir():
    return repo_path("data", "raw")


def resolve(params: dict[str, Any], profile: str | None = None,
            overrides: Sequence[str] = ()) -> tuple[str, WSIPrepConfig]:
    return load_data_config(WSIPrepConfig, params, SECTION, FOLLOWS, profile, overrides, params_path().name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tasks.wsi_prep", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stage", choices=["cohort", "downsample", "til-maps"])
    parser.add_argument("--profile", choices=list(PROFILES), default=None)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    from paperline.data import wsi, wsi_prep

    try:
        profile, cfg = resolve(read_params(params_path()), args.profile, args.overrides)
    except ParamsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    progress = sys.stderr.isatty()
    try:
        if args.stage == "cohort":
            path = wsi_prep.build_cohort(cfg, data_dir(), raw_dir(), progress=progress)
            print(f"wsi-cohort ({profile}): {path}")
        elif args.stage == "downsample":
            out = wsi_prep.downsample_cohort(cfg, data_dir(), progress=progress)
            print(f"wsi-downsample ({profile}): {len(out['slides'])} slides, {len(out['failed'])} failed")
        else:
            out = wsi_prep.register_cohort_til_maps(cfg, data_dir(), progress=progress)
            print(f"til-maps ({profile}): {len(out['slides'])} slides, {len(out['failed'])} failed")
    except (wsi.WSIError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
