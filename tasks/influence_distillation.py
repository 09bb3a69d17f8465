"""Tasks of the Influence Distillation flow: one fine-tuning task per selection method of the
tulu-select stage and fine-tuning seed (an MLflow child run per method, a run per seed under it),
the convex QP check, then the report. The selections, their timings and the warm-up they start
from come from data/tulu/selection (random selection at another seed is drawn again, as the stage
draws it)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.methods.influence_distillation.config import InfluenceDistillationConfig
from paperline.methods.influence_distillation.summary import method_metrics, row_of
from tasks import track
from tasks.paths import plots_dir
from tasks.publish import Report
from tasks.runners import GPU_TAG
from tasks.tulu_prep import selection_dir
from tasks.unit import unit

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
    from paperline.methods.influence_distillation.model import check_model
    from paperline.methods.influence_distillation.pipeline import SELECTION_FILE, load_selection

    check_model(cfg)  # a paper profile's model folder that is not one fails here, not in the fine-tune
    pool = Path(cfg.pool_dir)
    if not (pool / "pool.jsonl").is_file():
        raise FileNotFoundError(f"{pool}/pool.jsonl: no pool; run the tulu-pool stage "
                                "(dvc repro tulu-pool, or python -m flows run tulu-pool)")
    # selection.json, written last, stands for its folder: hashing the warm-up checkpoint (a
    # model and its Adam moments at the paper's size) on every flow start would cost minutes
    version = track.data_version([pool / "pool.jsonl", pool / "targets", selection_dir() / SELECTION_FILE])
    return SelectionData(load_selection(cfg, selection_dir()), version)


def variant_runs(cfg: InfluenceDistillationConfig, ctx: track.RunContext):
    """A child run per selection method, open while its seeds fine-tune (each seed's run nested
    under it); the method's row, the mean over seeds, lands on it when the flow publishes."""
    return ctx.children({m: {"method": m, "select_k": cfg.select_k, "seeds": cfg.run_seeds()} for m in cfg.methods})


@task(name="influence-distillation-finetune", tags=[GPU_TAG], cache_policy=NO_CACHE)
def finetune_variant(cfg: InfluenceDistillationConfig, method: str, seed: int, selection: dict, ctx: track.RunContext,
                     variant_run: track.Run | None = None) -> dict:
    """Fine-tune on one selection at one seed (same budget for all) and evaluate: an MLflow run
    `<method>/seed<seed>` nested under `variant_run`, this seed's row on it."""
    import json

    from paperline.methods.influence_distillation import pipeline
    from paperline.metrics import numeric
    from paperline.train.checkpoint import load_checkpoint

    with unit(ctx, f"{method}/seed{seed}", {"method": method, "seed": seed, "select_k": cfg.select_k},
              threads=cfg.threads, parent=variant_run) as u:
        run = u.run
        ids, sel, sel_path = pipeline.seed_selection(cfg, selection, selection_dir(), method, seed)
        out = u.models / "finetune" / method
        if sel_path is None:  # random selection drawn for this seed: kept beside its fine-tune
            sel_path = out / f"seed{seed}.selection.jsonl"
            sel_path.parent.mkdir(parents=True, exist_ok=True)
            sel_path.write_text("".join(json.dumps({"id": i}) + "\n" for i in ids))
        prep = pipeline.prepare_finetune(cfg, cfg.pool_dir, ids).to(u.device)
        warm_path = selection_dir() / pipeline.WARMUP_CHECKPOINT
        warm = load_checkpoint(warm_path)
        if warm is None:
            raise FileNotFoundError(f"{warm_path}: no warm-up checkpoint; run the tulu-select stage")
        checkpoint = out / f"seed{seed}.pt"
        result = pipeline.finetune_and_evaluate(cfg, prep, warm, list(range(len(ids))), checkpoint, method, seed)
        run.log_history("train_loss", result["history"]["step"], result["history"]["train_loss"])
        run.log_artifact(sel_path, "selection")
        run.log_artifact(checkpoint, "checkpoints")
        row = row_of(result["eval"], sel)
        run.log_final(numeric(row))  # this seed's figures
    return row


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
def report(selection: dict, per_seed: dict[str, dict[str, dict]], qp: dict, ctx: track.RunContext) -> Report:
    """The comparison against random selection (`per_seed`: {method: {seed: row}}, the rows the
    means over seeds), and the figures (PNG, and CSV for `dvc plots`)."""
    import numpy as np

    from paperline.methods.influence_distillation import plots

    history = selection["warmup_history"]  # the start every fine-tune shares, on the flow's run
    ctx.parent.log_history("warmup/train_loss", history["step"], history["train_loss"])
    metrics = method_metrics(selection, per_seed, qp, ctx.profile)
    scores_path = selection_dir() / "scores.npz"
    scores = dict(np.load(scores_path)) if scores_path.exists() else None
    return Report(metrics, plots.write_all(metrics, sorted(selection["before_finetune"]), qp, scores,
                                           plots_dir(METHOD)))
