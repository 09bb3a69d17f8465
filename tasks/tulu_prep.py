"""`python -m tasks.tulu_prep pool|select [--profile P] [--set key=value ...] [--skip-invalid]`: the
Tulu selection data-prep stages of dvc.yaml.

- `pool` (stage tulu-pool): parameters `tulu.profiles.<profile>` (TuluPoolConfig), the profile the
  one `influence_distillation.profile` names; writes <project>/data/tulu/ (pool.jsonl, targets/,
  manifest.json). `--skip-invalid` skips malformed lines of a real Tulu file and reports the counts.
- `select` (stage tulu-select): the selections on that pool with the method's parameters
  (`influence_distillation.profiles.<profile>`): the warm-up, then Influence Distillation (JVP
  embeddings, landmarks, propagation, round-robin) and its baselines (random, RDS+-like, exact
  first-order), each timed in this one process; writes <project>/data/tulu/selection/
  (<method>.jsonl of id, dataset, weight, rank, score; warmup.pt; scores.npz; selection.json).
  The method's flow fine-tunes on each.

Plain processes, no Prefect: DVC decides when they re-run.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, Sequence

from paperline.config import PROFILES, ParamsError, load_data_config, load_method_config, read_params
from tasks.paths import params_path, project_path, repo_path

SECTION = "tulu"
FOLLOWS = "influence_distillation"  # whose `profile` picks the data profile


def data_dir():
    return repo_path("data", "tulu")


def selection_dir():
    return data_dir() / "selection"


def with_resolved_paths(cfg):
    """A relative pool_dir / hf_model_path is relative to the project root (where params.yaml is)."""
    update = {key: str(project_path(getattr(cfg, key))) for key in ("pool_dir", "hf_model_path")
              if getattr(cfg, key) is not None}
    return cfg.model_copy(update=update)


def resolve_pool(params: dict[str, Any], profile: str | None = None, overrides: Sequence[str] = ()):
    from paperline.data.tulu_pool import TuluPoolConfig

    return load_data_config(TuluPoolConfig, params, SECTION, FOLLOWS, profile, overrides, params_path().name)


def run_select(profile: str | None, overrides: Sequence[str]) -> dict:
    import torch

    from paperline.methods.influence_distillation import pipeline
    from paperline.methods.influence_distillation.config import InfluenceDistillationConfig

    profile, cfg = load_method_config(InfluenceDistillationConfig, read_params(params_path()), FOLLOWS,
                                      profile, overrides, source=params_path().name)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    summary = pipeline.run_selection(with_resolved_paths(cfg), selection_dir(), device)
    return summary | {"profile": profile}


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
            for method, sel in summary["selections"].items():
                print(f"tulu-select ({summary['profile']}) {method}: {sel['wall_s']:.1f} s, "
                      f"{sel['gradient_evaluations']} gradient evaluations, {sel['forward_passes']} forward passes")
            print(f"  → {selection_dir()}")
    except (ParamsError, TuluFormatError, FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
