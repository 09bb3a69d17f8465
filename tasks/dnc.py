"""Tasks of the deep neural collapse flow: train one (K, L) group, then report the comparison."""
from __future__ import annotations

import sys

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.methods.dnc import plots
from paperline.methods.dnc.config import DNCConfig
from paperline.methods.dnc.summary import best_seed, method_metrics, summarize
from paperline.methods.dnc.ufm import UFMGroupResult, train_ufm_group
from tasks import track
from tasks.paths import plots_dir
from tasks.publish import Report
from tasks.runners import GPU_TAG
from tasks.unit import unit

METHOD = "dnc"


def variant_name(K: int, L: int) -> str:
    return f"K{K}_L{L}"


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
@task(name="dnc-train", tags=[GPU_TAG], cache_policy=NO_CACHE)
def train_group(cfg: DNCConfig, K: int, L: int, ctx: track.RunContext) -> list[UFMGroupResult]:
    """Every width × seed of one (K, L): one MLflow child run, one checkpoint per width."""
    variant = variant_name(K, L)
    results = []
    # one thread: tiny matmuls, threads cost more than they give; groups run side by side on Dask
    with unit(ctx, variant, {"K": K, "L": L}, threads=1) as u:
        run = u.run
        for m in cfg.width_multipliers:
            width = m * K
            checkpoint = u.models / variant / f"d{width}.pt"
            result = train_ufm_group(cfg, K, L, width, u.device, checkpoint_path=checkpoint,
                                     progress=sys.stderr.isatty())
            for s, curve in enumerate(result.history["objective"]):
                run.log_history(f"objective/d{width}/seed{s}", result.history["step"], curve)
            best = best_seed([result])  # None when every seed diverged
            run.log_metrics({f"d{width}/dnc_fraction": sum(s["is_dnc"] for s in result.seeds) / len(result.seeds)}
                            | ({f"d{width}/best_objective": best["objective"],
                                f"d{width}/best_rank": best["rank_1e-3"]} if best else {}))
            run.log_artifact(checkpoint, "checkpoints")
            results.append(result)
    return results


@task(name="dnc-report", cache_policy=NO_CACHE)
def report(cfg: DNCConfig, results: list[UFMGroupResult], ctx: track.RunContext) -> Report:
    """The comparison with the closed forms, and the figures (PNG, and CSV for `dvc plots`)."""
    summary = summarize(cfg, results)
    return Report(method_metrics(cfg, summary, results, ctx.profile),
                  plots.write_all(cfg, summary, results, plots_dir(METHOD)))
