"""Tasks of the NGN-M flow: sweep one (problem, optimizer) over c × seeds, then report."""
from __future__ import annotations

import sys
import time

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.methods.ngn_m import claims, plots
from paperline.methods.ngn_m.config import NGNMConfig
from paperline.methods.ngn_m.data import check_data, data_inputs
from paperline.methods.ngn_m.problems import PRIMARY_METRIC
from paperline.methods.ngn_m.summary import band_decades, c_tag, method_metrics, seed_mean, summarize, variant_curves
from paperline.methods.ngn_m.sweep import VariantResult, run_variant
from tasks import track
from tasks.paths import params_path, plots_dir, repo_root
from tasks.publish import Report
from tasks.runners import GPU_TAG
from tasks.unit import unit

METHOD = "ngn_m"


def variant_name(problem: str, optimizer: str) -> str:
    return f"{problem}-{optimizer}"


def data_version(cfg: NGNMConfig) -> str:
    """The real-data problems' folders checked (before any work), then sha256 over the files the
    problems read; for LM token files their names and sizes."""
    check_data(cfg, f"{params_path().name}: {METHOD}")
    paths, sizes = data_inputs(cfg)
    return track.data_version(paths) + ("+" + ",".join(sizes) if sizes else "")


def optimizer_runs(cfg: NGNMConfig, ctx: track.RunContext):
    """An MLflow child run per optimizer, open while its sweeps (one per problem) nest under it:
    the comparison row of the optimizer lands on it when the flow publishes."""
    optimizers = dict.fromkeys(o for problem in cfg.problems for o in cfg.optimizers_for(problem))
    return ctx.children({o: {"optimizer": o, "problems": [p for p in cfg.problems if o in cfg.optimizers_for(p)]}
                         for o in optimizers})


def _log_curves(run: track.Run, curves: dict[str, tuple[list, list]]) -> None:
    """All curves in as few MLflow calls as the batch limit allows (one SQLite write each)."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    items = [Metric(key, float(v), now, int(s)) for key, (steps, values) in curves.items()
             for s, v in zip(steps, values)]
    for i in range(0, len(items), track.STEP_BATCH):
        track.client().log_batch(run.run_id, metrics=items[i:i + track.STEP_BATCH])


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
@task(name="ngn_m-sweep", tags=[GPU_TAG], cache_policy=NO_CACHE)
def sweep(cfg: NGNMConfig, problem: str, optimizer: str, ctx: track.RunContext,
          optimizer_run: track.Run) -> VariantResult:
    """Every c × seed of one (problem, optimizer): an MLflow run nested under the optimizer's."""
    variant = variant_name(problem, optimizer)
    pcfg = cfg.problems[problem]
    params = {"problem": problem, "optimizer": optimizer, "seeds": cfg.seeds_for(problem),
              "c_values": cfg.c_values_for(problem), "momentum": cfg.momentum, "betas": cfg.betas,
              "eps": cfg.eps, "weight_decay": cfg.weight_decay, problem: pcfg.model_dump()}
    # one thread: tiny models, threads cost more than they give
    with unit(ctx, variant, params, threads=1, parent=optimizer_run) as u:
        run = u.run
        result = run_variant(cfg, problem, optimizer, u.models / variant, root=repo_root(),
                             device=u.device, progress=sys.stderr.isatty())
        _log_curves(run, variant_curves(result))
        metric, higher = PRIMARY_METRIC[pcfg.kind]
        run.log_metrics({f"final_{metric}/c_{c_tag(c)}": float(value)
                         for c, value in zip(result.c_values, seed_mean(result, metric))})
        run.log_metrics(band_decades(result.c_values, seed_mean(result, metric), higher, cfg.band))
        checkpoints = sorted((u.models / variant).glob("*.pt"))
        for checkpoint in checkpoints:
            run.log_artifact(checkpoint, "checkpoints")
    return result


@task(name="ngn_m-report", cache_policy=NO_CACHE)
def report(cfg: NGNMConfig, variants: list[VariantResult], ctx: track.RunContext) -> Report:
    """The comparison and the plots (PNG for MLflow and DVC, CSV for `dvc plots`)."""
    rows = summarize(variants, cfg.band)
    return Report(method_metrics(rows, variants, cfg.band, ctx.profile, claims.evaluate(variants, cfg.band)),
                  plots.write_all(variants, plots_dir(METHOD)))
