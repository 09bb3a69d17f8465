"""Tasks of the deep neural collapse flow: train one (K, L) group, then publish the comparison."""
from __future__ import annotations

import sys

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.io import write_json
from paperline.methods.dnc import plots
from paperline.methods.dnc.config import DNCConfig
from paperline.methods.dnc.summary import best_seed, claims, summarize
from paperline.methods.dnc.ufm import UFMGroupResult, train_ufm_group
from tasks import track
from tasks.paths import metrics_path, models_dir, plots_dir, run_pointer_path
from tasks.runners import GPU_TAG, gpu_slot

METHOD = "dnc"


def variant_name(K: int, L: int) -> str:
    return f"K{K}_L{L}"


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
@task(name="dnc-train", tags=[GPU_TAG], cache_policy=NO_CACHE)
def train_group(cfg: DNCConfig, K: int, L: int, parent: track.Run, profile: str,
                data: str) -> list[UFMGroupResult]:
    """Every width × seed of one (K, L): one MLflow child run, one checkpoint per width."""
    import torch

    torch.set_num_threads(1)  # tiny matmuls: threads cost more than they give; groups run side by side on Dask
    variant = variant_name(K, L)
    results = []
    with gpu_slot() as device, track.child_run(parent, METHOD, variant, profile, data,
                                               params={"K": K, "L": L, "device": str(device)}) as run:
        for m in cfg.width_multipliers:
            width = m * K
            checkpoint = models_dir(METHOD) / variant / f"d{width}.pt"
            result = train_ufm_group(cfg, K, L, width, device, checkpoint_path=checkpoint,
                                     progress=sys.stderr.isatty())
            for s, curve in enumerate(result.history["objective"]):
                run.log_history(f"objective/d{width}/seed{s}", result.history["step"], curve)
            best = best_seed([result])  # None when every seed diverged
            run.log_metrics({f"d{width}/dnc_fraction": sum(s["is_dnc"] for s in result.seeds) / len(result.seeds)}
                            | ({f"d{width}/best_objective": best["objective"],
                                f"d{width}/best_rank": best["rank_1e-3"]} if best else {}))
            run.log_artifact(checkpoint, "checkpoints")
            results.append(result)
        row = summarize(cfg, results)[variant]
        run.log_metrics({k: v for k, v in row.items() if isinstance(v, (int, float))})
    return results


@task(name="dnc-publish", cache_policy=NO_CACHE)
def publish(cfg: DNCConfig, results: list[UFMGroupResult], parent: track.Run) -> dict:
    """metrics/dnc.json, the plots (PNG for MLflow and DVC, CSV for `dvc plots`), mlflow_run.json."""
    summary = summarize(cfg, results)
    out = plots_dir(METHOD)
    paths = [plots.plot_rank_vs_depth(summary, out / "rank_vs_depth.png"),
             plots.plot_gap_vs_depth(summary, out / "objective_gap_vs_depth.png"),
             plots.plot_dnc_fraction_vs_width(summary, out / "dnc_fraction_vs_width.png")]
    for K in cfg.classes:
        of_K = [r for r in results if r.K == K]
        paths += [plots.plot_z_spectra(of_K, K, out / f"z_spectra_K{K}.png"),
                  plots.plot_layer_spectra(of_K, K, out / f"layer_spectra_K{K}.png"),
                  plots.plot_nc_by_layer(of_K, K, out / f"nc_by_layer_K{K}.png")]
    paths += plots.write_plot_tables(summary, out)
    for path in paths:
        parent.log_artifact(path, "plots")
    parent.log_metrics({f"{variant}/{k}": v for variant, row in summary.items()
                        for k, v in row.items() if isinstance(v, (int, float))})
    headline = claims(summary)
    parent.log_metrics({k: float(v) for k, v in headline.items() if v is not None})
    metrics = headline | summary
    write_json(metrics_path(METHOD), metrics)
    write_json(run_pointer_path(METHOD), track.run_pointer(parent, METHOD))
    return metrics
