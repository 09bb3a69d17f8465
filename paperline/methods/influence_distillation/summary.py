"""metrics/influence_distillation.json: one row per selection method (fine-tuned with the same
budget from the same warm-up), against random selection (the paper's baseline); the cost and
fidelity of Influence Distillation against the exact first-order reference and the convex QP check
as headline figures; the warm-up-only model, the QP check per learning rate, the propagation
fidelity per target set and per landmark count as tables."""
from __future__ import annotations

from paperline.metrics import MethodMetrics

BASELINE = "random"
# held-out assistant-token accuracy averaged over the targets: the paper compares the selections by
# the fine-tuned model's accuracy on the target tasks
PRIMARY = "target_accuracy_mean"


def row_of(evals: dict, sel: dict) -> dict:
    """A selection method's row: each target's held-out figures after fine-tuning, their means, and
    the selection's cost and composition (from selection.json)."""
    row = {f"{t}_{k}": v for t, e in evals.items() for k, v in e.items()}
    row["target_loss_mean"] = sum(e["loss"] for e in evals.values()) / len(evals)
    row["target_accuracy_mean"] = sum(e["token_accuracy"] for e in evals.values()) / len(evals)
    row |= {f"selection_{k}": v for k, v in sel.items() if k in ("wall_s", "gradient_evaluations", "forward_passes")}
    row |= {k: v for k, v in sel.items() if k.startswith("share_")}
    return row


def method_metrics(selection: dict, rows: dict[str, dict], qp: dict, profile: str) -> MethodMetrics:
    """`selection`: the tulu-select stage's selection.json; `rows`: row_of each fine-tuned method;
    `qp`: the convex QP check."""
    first, last = qp["rows"][0], qp["rows"][-1]
    headline = dict(selection["comparison"]) | {
        "qp_relative_weight_difference_smallest_lr": first["relative_weight_difference"],
        "qp_relative_weight_difference_largest_lr": last["relative_weight_difference"],
        "qp_support_jaccard_smallest_lr": first["support_jaccard"]}
    warmup = {f"{t}_{k}": v for t, e in selection["before_finetune"].items() for k, v in e.items()}
    tables = {"before_finetune": {"warmup_only": warmup},
              "qp_check": {f"lr={r['lr']:g}": r for r in qp["rows"]}}
    if selection.get("propagation_by_target"):  # which target set the propagation loses the exact ranking for
        tables["propagation_by_target"] = selection["propagation_by_target"]
    if selection.get("landmark_curve"):  # propagation Spearman against the exact influence per landmark count
        tables["landmark_curve"] = {f"landmarks={r['num_landmarks']}": r for r in selection["landmark_curve"]}
    return MethodMetrics(method="influence_distillation", profile=profile, headline=headline,
                         baseline=BASELINE if BASELINE in rows else None, primary_metric=PRIMARY,
                         higher_is_better=True, rows=rows, tables=tables)
