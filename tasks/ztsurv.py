"""Tasks of the ZTSurv flow: slides -> graphs, compute accounting, cross-validated training of each
method at each seed (an MLflow child run per method, a run per seed nested under it, a run per fold
under that), the report."""
from __future__ import annotations

import sys
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.config import read_params
from paperline.data.wsi_prep import WSIPrepConfig
from paperline.methods.ztsurv import plots
from paperline.methods.ztsurv.config import ZTSurvConfig
from paperline.methods.ztsurv.pipeline import load_cohort_graphs
from paperline.methods.ztsurv.summary import generator_truth, mean_rows, method_metrics, seed_rows
from paperline.methods.ztsurv.train import (
    FoldResult,
    composition_cox_fold,
    make_folds,
    random_risk_fold,
    train_neural_fold,
)
from paperline.train.records import finished_unit
from tasks import track
from tasks.paths import models_dir, params_path, plots_dir
from tasks.publish import Report
from tasks.runners import GPU_TAG
from tasks.unit import set_threads, unit
from tasks.wsi_prep import data_dir
from tasks.wsi_prep import resolve as resolve_wsi

METHOD = "ztsurv"
NEURAL = ("mean_pool", "abmil", "gcn", "ztsurv")


def wsi_config(profile: str | None) -> WSIPrepConfig:
    """The WSI prep parameters of `profile` (None: the one ztsurv.profile names), which made the data."""
    return resolve_wsi(read_params(params_path()), profile)[1]


def data_version(cfg: ZTSurvConfig) -> str:
    """The version of what the flow reads, which MLflow records: the cohort table and the prep outputs."""
    d = data_dir()
    return track.data_version([d / "cohort" / "cohort.csv", d / "thumbnails", d / "til"])


def graphs_path() -> Path:
    return models_dir(METHOD) / "graphs.pt"


def graphs_settings(cfg: ZTSurvConfig, ctx: track.RunContext) -> dict:
    """The key of the graphs' record: the config (but its seeds) and the data's version. The whole
    config, not only the fields the build reads: the run directory is cleared on any config change
    (tasks/resume.py: open_run_dir), so a record only ever meets its own run's config."""
    return {"config": cfg.model_dump(mode="json", exclude={"seeds"}), "data": ctx.data_version}


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
@task(name="ztsurv-graphs", cache_policy=NO_CACHE)
def build_graphs(cfg: ZTSurvConfig, ctx: track.RunContext) -> Path:
    """Segment every slide zero-shot and build its graph; a finished-unit record in
    models/ztsurv/graphs.pt, fingerprinted by graphs_settings (a resumed run reuses it)."""
    from paperline.methods.ztsurv.pipeline import build_cohort_graphs

    def build() -> dict:
        set_threads(cfg.threads)  # CPU work, no slot, no run of its own
        return build_cohort_graphs(data_dir(), cfg, progress=sys.stderr.isatty()).__dict__

    path = graphs_path()
    finished_unit(path, graphs_settings(cfg, ctx), build)
    return path


@task(name="ztsurv-compute", cache_policy=NO_CACHE)
def compute_accounting(cfg: ZTSurvConfig, wsi: WSIPrepConfig) -> dict | None:
    """Pixels and wall time: the 50x pipeline against 20x patch tiling on the first slides."""
    from paperline.methods.ztsurv.compute import cohort_slides, compare_pipelines

    if cfg.compute_slides == 0:
        return None
    return compare_pipelines(cohort_slides(data_dir(), cfg.compute_slides), cfg, wsi.downsample, wsi.til_tile_um)


def _seed_results(method: str, cfg: ZTSurvConfig, cohort, ctx: track.RunContext, run: track.Run,
                  train_one) -> dict[int, list[FoldResult]]:
    """Each seed (its own folds) on a run nested under the method's; each fold: its finished-unit
    record read back (fingerprinted by the config, the data's version, the method, seed and fold) or
    trained (`train_one(train, test, fold, seed)`) and recorded, then logged to a run nested under
    the seed's."""
    settings = {"config": cfg.model_dump(mode="json", exclude={"seeds", "seed"}), "data": ctx.data_version,
                "method": method}
    out = {}
    for seed in cfg.run_seeds():
        results = []
        with ctx.child(f"{method}/seed{seed}", params={"seed": seed}, parent=run) as seed_run:
            for k, (tr, te) in enumerate(make_folds(cohort.event, cfg.folds, seed)):
                path = models_dir(METHOD) / method / f"seed{seed}" / f"fold{k}.pt"
                unit_settings = settings | {"seed": seed, "fold": k}
                result = FoldResult(**finished_unit(path, unit_settings, lambda: train_one(tr, te, k, seed).__dict__))
                with ctx.child(f"{method}/seed{seed}/fold{k}", params={"fold": k, "train": len(tr), "test": len(te)},
                               parent=seed_run) as fold_run:
                    fold_run.log_metrics({"c_index": result.c_index})
                    if result.loss_history:
                        fold_run.log_history("train_cox_loss", range(len(result.loss_history)), result.loss_history)
                    if result.state_dict is not None:
                        fold_run.log_artifact(path, "checkpoints")
                result.state_dict = None  # the checkpoint is on disk; keep task results small
                results.append(result)
            seed_run.log_metrics({"c_index_mean": sum(r.c_index for r in results) / len(results)})
        out[seed] = results
    return out


@task(name="ztsurv-train", tags=[GPU_TAG], cache_policy=NO_CACHE)
def train_method(cfg: ZTSurvConfig, method: str, graphs: Path, ctx: track.RunContext) -> dict[int, list[FoldResult]]:
    """One neural method over every seed and fold: an MLflow child run, nested runs per seed and
    fold, a checkpoint per fold."""
    cohort = load_cohort_graphs(graphs, graphs_settings(cfg, ctx))
    with unit(ctx, method, {"method": method}, threads=cfg.threads) as u:
        run, device = u.run, u.device
        train_one = lambda tr, te, k, seed: train_neural_fold(method, cohort.graphs, tr, te,
                                                               cfg.model_copy(update={"seed": seed}), k, device,
                                                               progress=sys.stderr.isatty())
        return _seed_results(method, cfg, cohort, ctx, run, train_one)


@task(name="ztsurv-baseline", cache_policy=NO_CACHE)
def fit_baseline(cfg: ZTSurvConfig, method: str, graphs: Path, ctx: track.RunContext) -> dict[int, list[FoldResult]]:
    """Composition Cox or the random risk (the trivial baseline), in process, on the same folds."""
    cohort = load_cohort_graphs(graphs, graphs_settings(cfg, ctx))
    with ctx.child(method, params={"method": method}) as run:
        if method == "composition_cox":
            train_one = lambda tr, te, k, seed: composition_cox_fold(cohort.compositions, cohort.time, cohort.event,
                                                                     tr, te, k)
        elif method == "random_risk":
            train_one = lambda tr, te, k, seed: random_risk_fold(cohort.time, cohort.event, te, k, seed)
        else:
            raise ValueError(f"ztsurv.methods: {method!r} is not an in-process baseline")
        return _seed_results(method, cfg, cohort, ctx, run, train_one)


@task(name="ztsurv-report", cache_policy=NO_CACHE)
def report(cfg: ZTSurvConfig, results: dict[str, dict[int, list[FoldResult]]], graphs: Path, compute: dict | None,
           ctx: track.RunContext) -> Report:
    """The comparison (each method's row the mean over seeds; the claims from the seeds; scored
    against the generator's truth on the embedded cohort) and the plots (PNG for MLflow and DVC,
    CSV for `dvc plots`)."""
    cohort = load_cohort_graphs(graphs, graphs_settings(cfg, ctx))
    per_seed = seed_rows(results, cohort.time, cohort.event)
    rows = mean_rows(per_seed)
    facts, truth = generator_truth(data_dir(), cohort)
    return Report(method_metrics(rows, cohort, compute, facts, truth, ctx.profile, per_seed),
                  plots.write_all(cfg, cohort, results, rows, per_seed, facts, truth, data_dir(), plots_dir(METHOD)))
