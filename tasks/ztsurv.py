"""Tasks of the ZTSurv flow: slides -> graphs, compute accounting, cross-validated training of each
method (an MLflow child run per method, nested runs per fold), the report."""
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
from paperline.methods.ztsurv.summary import generator_truth, method_metrics, method_row
from paperline.methods.ztsurv.train import (FoldResult, composition_cox_fold, load_fold, make_folds, save_fold,
                                            train_neural_fold)
from tasks import track
from tasks.paths import models_dir, params_path, plots_dir
from tasks.publish import Report
from tasks.runners import GPU_TAG, gpu_slot
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


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
@task(name="ztsurv-graphs", cache_policy=NO_CACHE)
def build_graphs(cfg: ZTSurvConfig) -> Path:
    """Segment every slide zero-shot and build its graph; kept in models/ztsurv/graphs.pt (a
    resumed run reuses it)."""
    import torch

    from paperline.methods.ztsurv.pipeline import build_cohort_graphs, save_cohort_graphs

    path = graphs_path()
    if not path.exists():
        torch.set_num_threads(cfg.threads)
        save_cohort_graphs(path, build_cohort_graphs(data_dir(), cfg, progress=sys.stderr.isatty()))
    return path


@task(name="ztsurv-compute", cache_policy=NO_CACHE)
def compute_accounting(cfg: ZTSurvConfig, wsi: WSIPrepConfig) -> dict | None:
    """Pixels and wall time: the 50x pipeline against 20x patch tiling on the first slides."""
    from paperline.methods.ztsurv.compute import cohort_slides, compare_pipelines

    if cfg.compute_slides == 0:
        return None
    return compare_pipelines(cohort_slides(data_dir(), cfg.compute_slides), cfg, wsi.downsample, wsi.til_tile_um)


def _fold_results(method: str, cfg: ZTSurvConfig, cohort, ctx: track.RunContext, run: track.Run,
                  train_one) -> list[FoldResult]:
    """Each fold: resume its saved result or train it, then log it to a run nested under the method's."""
    results = []
    for k, (tr, te) in enumerate(make_folds(cohort.event, cfg.folds, cfg.seed)):
        path = models_dir(METHOD) / method / f"fold{k}.pt"
        result = load_fold(path)
        if result is None:
            result = train_one(tr, te, k)
            save_fold(path, result)
        with ctx.child(f"{method}/fold{k}", params={"fold": k, "train": len(tr), "test": len(te)},
                       parent=run) as fold_run:
            fold_run.log_metrics({"c_index": result.c_index})
            if result.loss_history:
                fold_run.log_history("train_cox_loss", range(len(result.loss_history)), result.loss_history)
            if result.state_dict is not None:
                fold_run.log_artifact(path, "checkpoints")
        result.state_dict = None  # the checkpoint is on disk; keep task results small
        results.append(result)
    return results


@task(name="ztsurv-train", tags=[GPU_TAG], cache_policy=NO_CACHE)
def train_method(cfg: ZTSurvConfig, method: str, graphs: Path, ctx: track.RunContext) -> list[FoldResult]:
    """One neural method over every fold: an MLflow child run, a nested run and checkpoint per fold."""
    import torch

    torch.set_num_threads(cfg.threads)
    cohort = load_cohort_graphs(graphs)
    with gpu_slot() as device, ctx.child(method, params={"method": method, "device": str(device)}) as run:
        train_one = lambda tr, te, k: train_neural_fold(method, cohort.graphs, tr, te, cfg, k, device,
                                                         progress=sys.stderr.isatty())
        return _fold_results(method, cfg, cohort, ctx, run, train_one)


@task(name="ztsurv-composition-cox", cache_policy=NO_CACHE)
def fit_composition_cox(cfg: ZTSurvConfig, graphs: Path, ctx: track.RunContext) -> list[FoldResult]:
    cohort = load_cohort_graphs(graphs)
    with ctx.child("composition_cox", params={"method": "composition_cox"}) as run:
        train_one = lambda tr, te, k: composition_cox_fold(cohort.compositions, cohort.time, cohort.event, tr, te, k)
        return _fold_results("composition_cox", cfg, cohort, ctx, run, train_one)


@task(name="ztsurv-report", cache_policy=NO_CACHE)
def report(cfg: ZTSurvConfig, results: dict[str, list[FoldResult]], graphs: Path, compute: dict | None,
           ctx: track.RunContext) -> Report:
    """The comparison (scored against the generator's truth on the embedded cohort) and the plots
    (PNG for MLflow and DVC, CSV for `dvc plots`)."""
    cohort = load_cohort_graphs(graphs)
    rows = {m: method_row(r, cohort.time, cohort.event) for m, r in results.items()}
    facts, truth = generator_truth(data_dir(), cohort)
    return Report(method_metrics(rows, cohort, compute, facts, truth, ctx.profile),
                  plots.write_all(cfg, cohort, results, rows, facts, truth, data_dir(), plots_dir(METHOD)))
