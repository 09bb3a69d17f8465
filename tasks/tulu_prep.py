"""`python -m tasks.tulu_prep pool|select [--profile P] [--set key=value ...] [--skip-invalid]`: the
Tulu selection data-prep stages of dvc.yaml.

- `pool` (stage tulu-pool): parameters `tulu.profiles.<profile>` (TuluPoolConfig), the profile the
  one `influence_distillation.profile` names; writes <project>/data/tulu/ (pool.jsonl, targets/,
  manifest.json). `--skip-invalid` skips malformed lines of a real Tulu file and reports the counts.
- `select` (stage tulu-select): Influence Distillation alone on that pool with the method's
  parameters (`influence_distillation.profiles.<profile>`): warm-up, JVP embeddings, landmarks,
  propagation, round-robin; writes <project>/data/tulu/selection/selected.jsonl (id, dataset,
  weight, rank, score) and summary.json. The method's flow repeats it beside its baselines.

Plain processes, no Prefect: DVC decides when they re-run.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, Sequence

from paperline.config import PROFILES, ParamsError, load_data_config, load_method_config, read_params
from tasks.paths import params_path, repo_path

SECTION = "tulu"
FOLLOWS = "influence_distillation"  # whose `profile` picks the data profile


def data_dir():
    return repo_path("data", "tulu")


def resolve_pool(params: dict[str, Any], profile: str | None = None, overrides: Sequence[str] = ()):
    from paperline.data.tulu_pool import TuluPoolConfig

    return load_data_config(TuluPoolConfig, params, SECTION, FOLLOWS, profile, overrides, params_path().name)


def run_select(profile: str | None, overrides: Sequence[str]) -> dict:
    import torch

    from paperline.io import atomic_dir, write_json
    from paperline.methods.influence_distillation import pipeline
    from paperline.methods.influence_distillation.config import InfluenceDistillationConfig
    from tasks.influence_distillation import with_resolved_paths

    profile, cfg = load_method_config(InfluenceDistillationConfig, read_params(params_path()), FOLLOWS,
                                      profile, overrides, source=params_path().name)
    cfg = with_resolved_paths(cfg.model_copy(update={"methods": ["influence_distillation"]}))
    torch.manual_seed(cfg.seed)
    prep = pipeline.prepare(cfg, cfg.pool_dir)
    optimizer, _ = pipeline.warm_up(cfg, prep, None)
    result = pipeline.select_all(cfg, prep, optimizer)
    sel = result["selections"]["influence_distillation"]
    with atomic_dir(data_dir() / "selection") as tmp:
        pipeline.write_selection(tmp / "selected.jsonl", prep, sel["indices"],
                                 result["scores"]["influence_distillation"])
        summary = {"profile": profile, "selected": len(sel["indices"]), "pool_size": len(prep.pool),
                   "wall_s": sel["wall_s"], "gradient_evaluations": sel["gradient_evaluations"],
                   "forward_passes": sel["forward_passes"], **pipeline.composition(prep, sel["indices"])}
        write_json(tmp / "summary.json", summary)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tasks.tulu_prep", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stage", choices=["pool", "select"])
    parser.add_argument("--profile", choices=list(PROFILES), default=None)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--skip-invalid", action="store_true",
                        help="pool: skip malformed lines of the Tulu file (counted in manifest.json)")
    args = parser.parse_args(argv)
    from paperline.data.tulu import TuluFormatError

    try:
        if args.stage == "pool":
            from paperline.data.tulu_pool import write_pool

            profile, cfg = resolve_pool(read_params(params_path()), args.profile, args.overrides)
            if args.skip_invalid:
                cfg = cfg.model_copy(update={"skip_invalid": True})
            manifest = write_pool(cfg, data_dir(), root=repo_path())
            skipped = manifest["skipped"]
            print(f"tulu-pool ({profile}): {manifest['pool_size']} pool samples, "
                  f"{len(manifest['targets'])} target sets; skipped {skipped['skipped']} invalid lines "
                  f"{skipped['reasons'] or ''}")
        else:
            summary = run_select(args.profile, args.overrides)
            print(f"tulu-select ({summary['profile']}): {summary['selected']} of {summary['pool_size']} "
                  f"selected with {summary['gradient_evaluations']} gradient evaluations")
    except (ParamsError, TuluFormatError, FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
