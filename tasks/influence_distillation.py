"""Tasks of the Influence Distillation flow: one fine-tuning task per selection method of the
tulu-select stage (an MLflow child run each), the convex QP check, then the report. The
selections, their timings and the warm-up they start from come from data/tulu/selection."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.methods.influence_distillation.config import InfluenceDistillationConfig
from paperline.methods.influence_distillation.summary import method_metrics, row_of
from tasks import track
from tasks.paths import models_dir, plots_dir
from tasks.publish import Report
from tasks.runners import GPU_TAG, gpu_slot
from tasks.tulu_prep import selection_dir

METHOD = "influence_distillation"


@dataclass(frozen=True)
class SelectionData:
    """The tulu-select stage's selection.json (checked against the flow's parameters) and the data
    version of the pool and the selection (picklable)."""

    selection: dict
    version: str


def data(cfg: InfluenceDistillationConfig) -> SelectionData:
    """A missing pool fails here, before any work; so does a missing selection, or one made with
    other parameters than this run's (naming the keys)."""
    from paperline.methods.influence_distillation.pipeline import SELECTION_FILE, load_selection

    pool = Path(cfg.pool_dir)
    if not (pool / "pool.jsonl").is_file():
        raise FileNotFoundError(f"{pool}/pool.jsonl: no pool; run the tulu-pool stage "
                                "(dvc repro tulu-pool, or python -m flows run tulu-pool)")
    # selection.json, written last, stands for its folder: hashing the warm-up checkpoint (a
    # model and its Adam moments at the paper's size) on every flow start would cost minutes
    version = track.data_version([pool / "pool.jsonl", pool / "targets", selection_dir() / SELECTION_FILE])
    return SelectionData(load_selection(cfg, selection_dir()), version)


@task(name="influence-distillation-finetune", tags=[GPU_TAG], cache_policy=NO_CACHE)
def finetune_variant(cfg: InfluenceDistillationConfig, method: str, selection: dict, ctx: track.RunContext) -> dict:
    """Fine-tune on one selection (same budget for all) and evaluate: one MLflow child run."""
    import json

    import torch

    from paperline.methods.influence_distillation import pipeline
    from paperline.train.checkpoint import load_checkpoint

    torch.set_num_threads(cfg.threads)
    sel = selection["selections"][method]
    sel_path = selection_dir() / sel["file"]
    with gpu_slot() as device, ctx.child(method, params={"method": method, "select_k": cfg.select_k,
                                                         "device": str(device)}) as run:
        ids = [json.loads(line)["id"] for line in sel_path.read_text().splitlines()]
        prep = pipeline.prepare_finetune(cfg, cfg.pool_dir, ids).to(device)
        warm_path = selection_dir() / pipeline.WARMUP_CHECKPOINT
        warm = load_checkpoint(warm_path)
        if warm is None:
            raise FileNotFoundError(f"{warm_path}: no warm-up checkpoint; run the tulu-select stage")
        checkpoint = models_dir(METHOD) / "finetune" / f"{method}.pt"
        result = pipeline.finetune_and_evaluate(cfg, prep, warm, list(range(len(ids))), checkpoint, method)
        run.log_history("train_loss", result["history"]["step"], result["history"]["train_loss"])
        run.log_artifact(sel_path, "selection")
        run.log_artifact(checkpoint, "checkpoints")
    return row_of(result["eval"], sel)


@task(name="influence-distillation-qp-check", cache_policy=NO_CACHE)
def qp_check(cfg: InfluenceDistillationConfig, ctx: track.RunContext) -> dict:
    """Spec §e convex check: the second-order QP on logistic regression against first order (CPU);
    its own child run, a value per learning rate."""
    from paperline.methods.influence_distillation.qp import qp_check as run_qp

    with ctx.child("qp_check", params=cfg.qp.model_dump()) as run:
        out = run_qp(cfg.qp.n_source, cfg.qp.n_target, cfg.qp.dim, cfg.qp.k, list(cfg.qp.lrs), cfg.seed)
        for row in out["rows"]:
            run.log_metrics({f"{k}/lr_{row['lr']:g}": v for k, v in row.items() if k != "lr"})
    return out


@task(name="influence-distillation-report", cache_policy=NO_CACHE)
def report(selection: dict, rows: dict[str, dict], qp: dict, ctx: track.RunContext) -> Report:
    """The comparison against random selection, and the figures (PNG, and CSV for `dvc plots`)."""
    import numpy as np

    from paperline.methods.influence_distillation import plots

    history = selection["warmup_history"]  # the start every fine-tune shares, on the flow's run
    ctx.parent.log_history("warmup/train_loss", history["step"], history["train_loss"])
    metrics = method_metrics(selection, rows, qp, ctx.profile)
    scores_path = selection_dir() / "scores.npz"
    scores = dict(np.load(scores_path)) if scores_path.exists() else None
    return Report(metrics, plots.write_all(metrics, sorted(selection["before_finetune"]), qp, scores,
                                           plots_dir(METHOD)))
