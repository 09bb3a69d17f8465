"""Tasks of the ZTSurv flow: slides -> graphs, compute accounting, cross-validated training of each
method (an MLflow child run per method, nested runs per fold), publish."""
from __future__ import annotations

import sys
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.io import read_json, write_json
from paperline.methods.ztsurv import plots
from paperline.methods.ztsurv.config import ZTSurvConfig
from paperline.methods.ztsurv.summary import (median_split, method_row, segmentation_scores, summarize,
                                              truth_on_thumbnail)
from paperline.methods.ztsurv.train import (FoldResult, c_index, composition_cox_fold, load_fold, make_folds,
                                            out_of_fold, save_fold, train_neural_fold)
from tasks import track
from tasks.paths import metrics_path, models_dir, plots_dir, run_pointer_path
from tasks.runners import GPU_TAG, gpu_slot
from tasks.wsi_prep import data_dir

METHOD = "ztsurv"
NEURAL = ("mean_pool", "abmil", "gcn", "ztsurv")


def data_inputs() -> list[Path]:
    """What the flow reads (the data version MLflow records): the cohort table and the prep outputs."""
    d = data_dir()
    return [d / "cohort" / "cohort.csv", d / "thumbnails", d / "til"]


def graphs_path() -> Path:
    return models_dir(METHOD) / "graphs.pt"


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
@task(name="ztsurv-graphs", cache_policy=NO_CACHE)
def build_graphs(cfg: ZTSurvConfig) -> Path:
    """Segment every slide zero-shot and build its graph; kept in models/ztsurv/graphs.pt (a
    resumed run reuses it)."""
    import torch

    from paperline.methods.ztsurv.pipeline import build_cohort_graphs
    from paperline.train.checkpoint import save_checkpoint

    path = graphs_path()
    if not path.exists():
        torch.set_num_threads(cfg.threads)
        save_checkpoint(path, build_cohort_graphs(data_dir(), cfg, progress=sys.stderr.isatty()).__dict__)
    return path


def load_graphs(path: Path):
    from paperline.methods.ztsurv.pipeline import CohortGraphs
    from paperline.train.checkpoint import load_checkpoint

    return CohortGraphs(**load_checkpoint(path))


@task(name="ztsurv-compute", cache_policy=NO_CACHE)
def compute_accounting(cfg: ZTSurvConfig, downsample: float, til_tile_um: float) -> dict | None:
    """Pixels and wall time: the 50x pipeline against 20x patch tiling on the first slides."""
    from paperline.data.wsi import read_cohort_csv
    from paperline.methods.ztsurv.compute import compare_pipelines

    if cfg.compute_slides == 0:
        return None
    thumbs = read_json(data_dir() / "thumbnails" / "index.json")["slides"]
    rows = [r for r in read_cohort_csv(data_dir() / "cohort" / "cohort.csv") if r.patient_id in thumbs]
    slides = [(r.slide_path, r.til_map_path) for r in rows[:cfg.compute_slides]]
    return compare_pipelines(slides, cfg, downsample, til_tile_um)


def _log_fold(run: track.Run, result: FoldResult) -> None:
    run.log_metrics({"c_index": result.c_index})
    if result.loss_history:
        run.log_history("train_cox_loss", range(len(result.loss_history)), result.loss_history)


def _fold_results(method: str, cfg: ZTSurvConfig, cohort, run: track.Run, profile: str, data: str,
                  train_one) -> list[FoldResult]:
    """Each fold: resume its saved result or train it, then log it to a nested MLflow run."""
    results = []
    for k, (tr, te) in enumerate(make_folds(cohort.event, cfg.folds, cfg.seed)):
        path = models_dir(METHOD) / method / f"fold{k}.pt"
        result = load_fold(path)
        if result is None:
            result = train_one(tr, te, k)
            save_fold(path, result)
        with track.child_run(run, METHOD, f"{method}/fold{k}", profile, data,
                             params={"fold": k, "train": len(tr), "test": len(te)}) as fold_run:
            _log_fold(fold_run, result)
            if result.state_dict is not None:
                fold_run.log_artifact(path, "checkpoints")
        result.state_dict = None  # the checkpoint is on disk; keep task results small
        results.append(result)
    return results


@task(name="ztsurv-train", tags=[GPU_TAG], cache_policy=NO_CACHE)
def train_method(cfg: ZTSurvConfig, method: str, graphs: Path, parent: track.Run, profile: str,
                 data: str) -> list[FoldResult]:
    """One neural method over every fold: an MLflow child run, a nested run and checkpoint per fold."""
    import torch

    torch.set_num_threads(cfg.threads)
    cohort = load_graphs(graphs)
    with gpu_slot() as device, track.child_run(parent, METHOD, method, profile, data,
                                               params={"method": method, "device": str(device)}) as run:
        train_one = lambda tr, te, k: train_neural_fold(method, cohort.graphs, tr, te, cfg, k, device,
                                                         progress=sys.stderr.isatty())
        results = _fold_results(method, cfg, cohort, run, profile, data, train_one)
        run.log_metrics(method_row(results, cohort.time, cohort.event))
    return results


@task(name="ztsurv-composition-cox", cache_policy=NO_CACHE)
def fit_composition_cox(cfg: ZTSurvConfig, graphs: Path, parent: track.Run, profile: str,
                        data: str) -> list[FoldResult]:
    cohort = load_graphs(graphs)
    with track.child_run(parent, METHOD, "composition_cox", profile, data,
                         params={"method": "composition_cox"}) as run:
        train_one = lambda tr, te, k: composition_cox_fold(cohort.compositions, cohort.time, cohort.event, tr, te, k)
        results = _fold_results("composition_cox", cfg, cohort, run, profile, data, train_one)
        run.log_metrics(method_row(results, cohort.time, cohort.event))
    return results


def _truth(cohort) -> tuple[dict, dict]:
    """The embedded cohort's generator facts and label maps on the thumbnail grid ({} otherwise)."""
    import numpy as np
    from PIL import Image

    from paperline.data.wsi_prep import THUMB_DIR

    gen_path = data_dir() / "cohort" / "generator.json"
    if not gen_path.exists():
        return {}, {}
    gen = read_json(gen_path)
    facts = {p["patient_id"]: p for p in gen["patients"]}
    thumbs = read_json(data_dir() / THUMB_DIR / "index.json")["slides"]
    truth = {}
    for pid in cohort.patient_ids:
        t = np.asarray(Image.open(data_dir() / "cohort" / "truth" / f"{pid}.png"))
        e = thumbs[pid]
        truth[pid] = truth_on_thumbnail(t, cohort.labels[pid].shape, tuple(e["base_size"]), e["mpp"], gen["design_um"])
    return facts, truth


@task(name="ztsurv-publish", cache_policy=NO_CACHE)
def publish(cfg: ZTSurvConfig, results: dict[str, list[FoldResult]], graphs: Path, compute: dict | None,
            parent: track.Run) -> dict:
    """metrics/ztsurv.json, the plots (PNG for MLflow and DVC, CSV for `dvc plots`), mlflow_run.json."""
    import numpy as np

    from paperline.data.wsi_prep import THUMB_DIR, load_thumbnail

    cohort = load_graphs(graphs)
    time, event = cohort.time, cohort.event
    rows = {m: method_row(r, time, event) for m, r in results.items()}
    facts, truth = _truth(cohort)
    oracle = None
    if facts:
        eta = np.array([facts[p]["eta"] for p in cohort.patient_ids])
        contact = np.array([facts[p]["tl_contact"] for p in cohort.patient_ids])
        oracle = {"c_index_generator_eta": c_index(event, time, eta),  # the ceiling the images encode
                  "c_index_generator_contact": c_index(event, time, -contact)}
    summary = summarize(rows, len(time), int(event.sum()), cohort.failed, compute,
                        segmentation_scores(cohort.labels, truth) if truth else None, oracle, cohort.til_sources)

    out = plots_dir(METHOD)
    thumbs = read_json(data_dir() / THUMB_DIR / "index.json")["slides"]
    order = np.argsort([facts[p]["risk_rank"] for p in cohort.patient_ids]) if facts else np.arange(len(time))
    picks = list(dict.fromkeys([*order[:(cfg.overlay_slides + 1) // 2], *order[::-1][:cfg.overlay_slides // 2]]))
    items = []
    for i in picks:
        pid = cohort.patient_ids[i]
        thumb, _ = load_thumbnail(data_dir(), pid, thumbs[pid])
        note = f"risk rank {facts[pid]['risk_rank']:.2f}, T-L contact {facts[pid]['tl_contact']:.2f}" if facts else ""
        items.append({"patient_id": pid, "rgb": thumb.rgb, "labels": cohort.labels[pid], "truth": truth.get(pid),
                      "note": note})
    first = cohort.patient_ids[picks[0]]
    paths = [plots.plot_overlays(items, out / "segmentation_overlays.png"),
             plots.plot_graph(items[0]["rgb"], cohort.graphs[picks[0]], cfg.cell_px, out / "graph_one_slide.png",
                              title=f"graph of {first}"),
             plots.plot_km({m: {"high": median_split(out_of_fold(r, len(time))), "logrank_p": rows[m]["logrank_p"]}
                            for m, r in results.items()}, time, event, out / "km_risk_groups.png"),
             plots.plot_c_index(rows, {m: [f.c_index for f in r] for m, r in results.items()},
                                out / "c_index_by_method.png"),
             plots.write_c_index_csv(rows, out / "c_index.csv")]
    for path in paths:
        parent.log_artifact(path, "plots")
    parent.log_metrics({k: v for k, v in summary.items() if isinstance(v, (int, float)) and v is not None})
    parent.log_metrics({f"{m}/{k}": v for m, row in rows.items() for k, v in row.items() if v is not None})
    write_json(metrics_path(METHOD), summary)
    write_json(run_pointer_path(METHOD), track.run_pointer(parent, METHOD))
    return summary
