"""Tasks of the Influence Distillation flow: one fine-tuning task per selection method of the
tulu-select stage (an MLflow child run each), the convex QP check, then publishing the comparison.
The selections, their timings and the warm-up they start from come from data/tulu/selection."""
from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.io import write_json
from paperline.methods.influence_distillation.config import InfluenceDistillationConfig
from tasks import track
from tasks.paths import metrics_path, models_dir, plots_dir, run_pointer_path
from tasks.runners import GPU_TAG, gpu_slot
from tasks.tulu_prep import selection_dir

METHOD = "influence_distillation"


def data_version(cfg: InfluenceDistillationConfig) -> str:
    from paperline.methods.influence_distillation.pipeline import SELECTION_FILE

    pool = Path(cfg.pool_dir)
    if not (pool / "pool.jsonl").is_file():
        raise FileNotFoundError(f"{pool}/pool.jsonl: no pool; run the tulu-pool stage "
                                "(dvc repro tulu-pool, or python -m flows run tulu-pool)")
    # selection.json, written last, stands for its folder: hashing the warm-up checkpoint (a
    # model and its Adam moments at the paper's size) on every flow start would cost minutes
    return track.data_version([pool / "pool.jsonl", pool / "targets", selection_dir() / SELECTION_FILE])


def load_selection(cfg: InfluenceDistillationConfig) -> dict:
    from paperline.methods.influence_distillation.pipeline import load_selection as load

    return load(cfg, selection_dir())


@task(name="influence-distillation-finetune", tags=[GPU_TAG], cache_policy=NO_CACHE)
def finetune_variant(cfg: InfluenceDistillationConfig, method: str, selection: dict, parent: track.Run,
                     profile: str, data: str) -> dict:
    """Fine-tune on one selection (same budget for all) and evaluate: one MLflow child run."""
    import json

    import torch

    from paperline.methods.influence_distillation import pipeline
    from paperline.train.checkpoint import load_checkpoint

    torch.set_num_threads(cfg.threads)
    sel = selection["selections"][method]
    sel_path = selection_dir() / sel["file"]
    with gpu_slot() as device, track.child_run(parent, METHOD, method, profile, data,
                                               params={"method": method, "select_k": cfg.select_k,
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
        row = row_of(result["eval"], sel)
        run.log_metrics(row)
        run.log_artifact(sel_path, "selection")
        run.log_artifact(checkpoint, "checkpoints")
    return row


def row_of(evals: dict, sel: dict) -> dict:
    row = {f"{t}_{k}": v for t, e in evals.items() for k, v in e.items()}
    row["target_loss_mean"] = sum(e["loss"] for e in evals.values()) / len(evals)
    row["target_accuracy_mean"] = sum(e["token_accuracy"] for e in evals.values()) / len(evals)
    row |= {f"selection_{k}": v for k, v in sel.items() if k in ("wall_s", "gradient_evaluations", "forward_passes")}
    row |= {k: v for k, v in sel.items() if k.startswith("share_")}
    return row


@task(name="influence-distillation-qp-check", cache_policy=NO_CACHE)
def qp_check(cfg: InfluenceDistillationConfig, parent: track.Run) -> dict:
    """Spec §e convex check: the second-order QP on logistic regression against first order (CPU)."""
    from paperline.methods.influence_distillation.qp import qp_check as run_qp

    out = run_qp(cfg.qp.n_source, cfg.qp.n_target, cfg.qp.dim, cfg.qp.k, list(cfg.qp.lrs), cfg.seed)
    for row in out["rows"]:
        parent.log_metrics({f"qp/{k}/lr_{row['lr']:g}": v for k, v in row.items() if k != "lr"})
    return out


@task(name="influence-distillation-publish", cache_policy=NO_CACHE)
def publish(cfg: InfluenceDistillationConfig, selection: dict, rows: dict[str, dict], qp: dict,
            parent: track.Run) -> dict:
    """metrics/influence_distillation.json, the plots (PNG and CSV), mlflow_run.json."""
    import numpy as np

    from paperline.methods.influence_distillation import plots

    targets = sorted(selection["before_finetune"])
    summary: dict = {m: row for m, row in rows.items()}
    summary["before_finetune"] = {f"{t}_{k}": v for t, e in selection["before_finetune"].items() for k, v in e.items()}
    summary |= selection["comparison"]
    history = selection["warmup_history"]
    parent.log_history("warmup/train_loss", history["step"], history["train_loss"])
    parent.log_metrics({f"selection/{k}": v for k, v in selection["comparison"].items()})
    first, last = qp["rows"][0], qp["rows"][-1]
    summary |= {"qp_relative_weight_difference_smallest_lr": first["relative_weight_difference"],
                "qp_relative_weight_difference_largest_lr": last["relative_weight_difference"],
                "qp_support_jaccard_smallest_lr": first["support_jaccard"]}
    out = plots_dir(METHOD)
    paths = [plots.plot_target_metrics(rows, targets, out / "target_accuracy.png"),
             plots.plot_qp_check(qp, out / "qp_first_vs_second_order.png"),
             plots.write_csv(out / "target_metrics.csv", ["method", "target", "loss", "token_accuracy"],
                             [[m, t, r[f"{t}_loss"], r[f"{t}_token_accuracy"]] for m, r in rows.items() for t in targets]),
             plots.write_csv(out / "qp_check.csv", list(qp["rows"][0]), [list(r.values()) for r in qp["rows"]])]
    scores = selection_dir() / "scores.npz"
    if scores.exists():
        s = np.load(scores)
        paths.append(plots.plot_propagated_vs_exact(s["exact"], s["propagated"],
                                                    summary.get("id_vs_exact_spearman_of_target_mean", float("nan")),
                                                    out / "propagated_vs_exact.png"))
        paths.append(plots.write_csv(out / "propagated_vs_exact.csv", ["exact", "propagated"],
                                     [[float(a), float(b)] for a, b in zip(s["exact"], s["propagated"])]))
    for path in paths:
        parent.log_artifact(path, "plots")
    parent.log_metrics({f"{m}/{k}": v for m, row in rows.items() for k, v in row.items()})
    parent.log_metrics({k: v for k, v in summary.items() if isinstance(v, (int, float))})
    write_json(metrics_path(METHOD), summary)
    write_json(run_pointer_path(METHOD), track.run_pointer(parent, METHOD))
    return summary
