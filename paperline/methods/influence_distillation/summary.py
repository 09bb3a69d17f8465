"""metrics/influence_distillation.json: one row per selection method (fine-tuned with the same
budget from the same warm-up), against random selection (the paper's baseline): the mean over the
fine-tuning seeds of each figure, the target figures' spread (`<figure>_std`, sample std:
paperline.seeds), every seed's row in details (`per_seed`); the cost and fidelity of Influence
Distillation against the exact first-order reference and the convex QP check as headline figures;
the warm-up-only model, the QP check per learning rate, the propagation fidelity per target set and
per landmark count as tables; the claims (influence_distillation/claims.py), paired by seed."""
from __future__ import annotations

from paperline.methods.influence_distillation import claims
from paperline.metrics import MethodMetrics
from paperline.seeds import mean_over_seeds

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


def mean_rows(per_seed: dict[str, dict[str, dict]]) -> dict[str, dict]:
    """Per selection method, the mean over its seeds of every figure (a figure every seed shares,
    the selection's cost, kept as it is), `<figure>_std` for the fine-tuned model's target figures,
    and `seeds` (how many)."""
    def target_figure(key: str) -> bool:
        return not key.startswith(("selection_", "share_"))

    return {m: mean_over_seeds(list(seeds.values()), spread=target_figure, keep_shared=True) | {"seeds": len(seeds)}
            for m, seeds in per_seed.items()}


def method_metrics(selection: dict, per_seed: dict[str, dict[str, dict]], qp: dict, profile: str) -> MethodMetrics:
    """`selection`: the tulu-select stage's selection.json; `per_seed`: {method: {seed: row_of its
    fine-tune}}; `qp`: the convex QP check."""
    rows = mean_rows(per_seed)
    first, last = (f(qp["rows"], key=lambda r: r["lr"]) for f in (min, max))  # the smallest lr, the largest
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
                         higher_is_better=True, rows=rows, tables=tables, details={"per_seed": per_seed},
                         claims=claims.evaluate(per_seed, first["relative_weight_difference"]))
