"""metrics/model_shapley.json: one row per ranking (variant), the claims as figures computed from
the run (never written by hand), and the curves in details."""
from __future__ import annotations

import math

from paperline.methods.model_shapley.config import ModelShapleyConfig
from paperline.metrics import MethodMetrics

# the rankings the paper compares Model Shapley against (spec §c, §e)
BASELINES = ("magnitude", "grad_weight", "obd", "random")


def _lm_auc(curve: dict) -> float:
    """Mean log-perplexity (= mean loss) over the pruned fractions."""
    return sum(curve["loss"]) / len(curve["loss"])


def rows(results: dict[str, dict]) -> dict[str, dict]:
    out = {}
    for variant, r in results.items():
        d, lm = r["digits"], r["lm"]
        out[variant] = {
            "spearman_vs_shapley": d["spearman_vs_shapley"],
            "prune_accuracy_auc": d["prune_accuracy_auc"],
            "prune_loss_auc": d["prune_loss_auc"],
            "prune_accuracy_at_50pct": _at(d["curve"], "accuracy", 0.5),
            "finetune_shift_accuracy": d["finetune_shift_accuracy"],
            "finetune_shift_loss": d["finetune_shift_loss"],
            "lm_prune_loss_auc": _lm_auc(lm),
            "lm_ppl_at_50pct": _at(lm, "perplexity", 0.5),
        }
    return out


def _at(curve: dict, key: str, fraction: float) -> float | None:
    for f, v in zip(curve["fraction"], curve[key]):
        if math.isclose(f, fraction):
            return v
    return None


def _best(table: dict[str, dict], column: str, higher: bool) -> str | None:
    scored = {v: r[column] for v, r in table.items() if r[column] is not None}
    if not scored:
        return None
    return (max if higher else min)(scored, key=lambda v: (scored[v], v))


def claims(table: dict[str, dict]) -> dict:
    """Model Shapley against its baselines on each measure: whether it is best among itself and the
    baselines present, and its margin over the best baseline (positive: better)."""
    ours = "model_shapley"
    if ours not in table:
        return {}
    measures = {"spearman_vs_shapley": True, "prune_accuracy_auc": True, "finetune_shift_accuracy": True,
                "lm_prune_loss_auc": False}
    headline = {}
    for column, higher in measures.items():
        contenders = {v: table[v] for v in (ours, *BASELINES) if v in table}
        best = _best(contenders, column, higher)
        baselines = {v: r for v, r in contenders.items() if v != ours}
        best_base = _best(baselines, column, higher)
        headline[f"model_shapley_best_{column}"] = best == ours
        if best_base is not None:
            margin = table[ours][column] - baselines[best_base][column]
            headline[f"model_shapley_margin_{column}"] = margin if higher else -margin
            headline[f"best_baseline_{column}"] = best_base
    headline["model_shapley_spearman"] = table[ours]["spearman_vs_shapley"]
    return headline


def method_metrics(cfg: ModelShapleyConfig, gt: dict, scores: dict, lm: dict, results: dict[str, dict],
                   profile: str) -> MethodMetrics:
    table = rows(results)
    headline = claims(table) | {
        "ground_truth_split_half_spearman": gt["split_half_spearman"],
        # the closed form's efficiency on the real (non-quadratic) loss: Σφ against L(θ) − L(0)
        "closed_form_sum_phi": scores["sum_phi"],
        "loss_full_minus_empty": scores["loss_full_minus_empty"],
        "paper_form_sum_phi": scores["sum_paper_phi"],
        "digits_estimator_over_train_step": scores["cost"]["estimator_over_train_step"],
        "lm_estimator_over_train_step": lm["cost"]["estimator_over_train_step"],
        "lm_val_perplexity": lm["val_perplexity"],
    }
    details = {
        "ground_truth": {k: gt[k] for k in ("phi", "stderr", "split_half_spearman", "sum_phi",
                                            "value_full_minus_empty", "permutations")},
        "digits_cost": scores["cost"], "lm_cost": lm["cost"], "lm_aggregates": lm["aggregates"],
        "curves": {v: {"digits": r["digits"]["curve"], "lm": r["lm"]} for v, r in results.items()},
        "finetune_units": {v: r["digits"]["finetune_units"] for v, r in results.items()},
        "shift_accuracy_before_finetune": next(iter(results.values()))["digits"]["shift_accuracy_before"],
        "fisher": cfg.estimator.fisher,
    }
    baseline = "magnitude" if "magnitude" in table else None
    return MethodMetrics(method="model_shapley", profile=profile, headline=headline, baseline=baseline,
                         primary_metric="spearman_vs_shapley", higher_is_better=True, rows=table, details=details)
