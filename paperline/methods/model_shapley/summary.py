"""metrics/model_shapley.json: one row per ranking (variant), the mean over seeds of each seed's
row; the claims (paperline/methods/model_shapley/claims.py, paired by seed); Model Shapley's margin
over the best baseline on each measure as plain figures (computed from the run, never written by
hand); the curves (mean over seeds) and the first seed's ground truth and costs in details.

`per_seed` maps a seed to that seed's run: {"gt": ground truth, "scores": the MLP's estimator
scores, "lm": the LM's training and scores, "results": {ranking: its evaluation}}."""
from __future__ import annotations

import math
import statistics

import numpy as np

from paperline.methods.model_shapley import claims as shapley_claims
from paperline.methods.model_shapley.config import ModelShapleyConfig
from paperline.metrics import MethodMetrics
from paperline.seeds import mean_over_seeds

# the rankings the paper compares Model Shapley against (spec §c, §e)
BASELINES = ("magnitude", "grad_weight", "obd", "random")
PRIMARY = "spearman_vs_shapley"
# measure -> higher is better
MEASURES = {"spearman_vs_shapley": True, "prune_accuracy_auc": True, "finetune_shift_accuracy": True,
            "lm_prune_loss_auc": False}


def _lm_auc(curve: dict) -> float:
    """Mean log-perplexity (= mean loss) over the pruned fractions."""
    return sum(curve["loss"]) / len(curve["loss"])


def rows(results: dict[str, dict]) -> dict[str, dict]:
    """One seed's table: a row per ranking."""
    out = {}
    for variant, r in results.items():
        d, lm = r["digits"], r["lm"]
        out[variant] = {
            "spearman_vs_shapley": d["spearman_vs_shapley"],  # against the signed ground truth φ
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


def mean_table(seed_tables: dict[int, dict[str, dict]]) -> dict[str, dict]:
    """A row per ranking: the mean over seeds of its figures (a figure a curve lacks, e.g. at 50%,
    left out), with the sample std over seeds of the primary metric."""
    variants = next(iter(seed_tables.values()))
    return {v: mean_over_seeds([{k: x for k, x in t[v].items() if x is not None} for t in seed_tables.values()],
                               spread=lambda key: key == PRIMARY)
            for v in variants}


def _best(table: dict[str, dict], column: str, higher: bool) -> str | None:
    scored = {v: r[column] for v, r in table.items() if r.get(column) is not None}
    if not scored:
        return None
    return (max if higher else min)(scored, key=lambda v: (scored[v], v))


def margins(table: dict[str, dict]) -> dict:
    """Model Shapley's margin over the best baseline present on each measure (positive: better) and
    that baseline's name: plain figures; the verdicts are the claims."""
    ours = "model_shapley"
    if ours not in table:
        return {}
    headline = {}
    for column, higher in MEASURES.items():
        baselines = {v: table[v] for v in BASELINES if v in table}
        best_base = _best(baselines, column, higher)
        if best_base is not None:
            margin = table[ours][column] - baselines[best_base][column]
            headline[f"model_shapley_margin_{column}"] = margin if higher else -margin
            headline[f"best_baseline_{column}"] = best_base
    headline["model_shapley_spearman"] = table[ours]["spearman_vs_shapley"]
    return headline


def _mean(values) -> float:
    return float(statistics.fmean(values))


def mean_curves(per_seed: dict[int, dict]) -> dict[str, dict]:
    """ranking -> {"digits": its pruning curve, "lm": its LM curve}, each value the mean over seeds."""
    runs = [p["results"] for p in per_seed.values()]
    out = {}
    for v in runs[0]:
        digits = [r[v]["digits"]["curve"] for r in runs]
        lm = [r[v]["lm"] for r in runs]
        out[v] = {"digits": {"fraction": digits[0]["fraction"],
                             **{k: np.mean([c[k] for c in digits], axis=0).tolist() for k in ("accuracy", "loss")}},
                  "lm": {"fraction": lm[0]["fraction"],
                         **{k: np.mean([c[k] for c in lm], axis=0).tolist() for k in ("loss", "perplexity")}}}
    return out


def method_metrics(cfg: ModelShapleyConfig, per_seed: dict[int, dict], profile: str) -> MethodMetrics:
    seed_tables = {seed: rows(p["results"]) for seed, p in per_seed.items()}
    table = mean_table(seed_tables)
    seeds = list(per_seed)
    first = per_seed[seeds[0]]
    gts, scores, lms = ([p[k] for p in per_seed.values()] for k in ("gt", "scores", "lm"))
    headline = margins(table) | {
        "ground_truth_split_half_spearman": _mean(g["split_half_spearman"] for g in gts),
        # the closed form's efficiency on the real (non-quadratic) loss: Σφ against L(θ) − L(0)
        "closed_form_sum_phi": _mean(s["sum_phi"] for s in scores),
        "loss_full_minus_empty": _mean(s["loss_full_minus_empty"] for s in scores),
        "paper_form_sum_phi": _mean(s["sum_paper_phi"] for s in scores),
        "digits_estimator_over_train_step": _mean(s["cost"]["estimator_over_train_step"] for s in scores),
        "lm_estimator_over_train_step": _mean(m["cost"]["estimator_over_train_step"] for m in lms),
        "lm_val_perplexity": _mean(m["val_perplexity"] for m in lms),
    }
    details = {
        "seeds": seeds,
        "seed_rows": {str(seed): t for seed, t in seed_tables.items()},
        "ground_truth": {"seed": seeds[0], **{k: first["gt"][k] for k in
                                              ("phi", "stderr", "split_half_spearman", "sum_phi",
                                               "value_full_minus_empty", "permutations")}},
        "ground_truth_split_half_spearman_by_seed": {str(s): p["gt"]["split_half_spearman"] for s, p in per_seed.items()},
        # neurons whose removal lowers the validation loss: with none, signed and |φ| rank alike
        "ground_truth_negative_units_by_seed": {str(s): sum(x < 0 for x in p["gt"]["phi"]) for s, p in per_seed.items()},
        "digits_cost": first["scores"]["cost"], "lm_cost": first["lm"]["cost"], "lm_aggregates": first["lm"]["aggregates"],
        "curves": mean_curves(per_seed),
        "finetune_units": {v: r["digits"]["finetune_units"] for v, r in first["results"].items()},
        "shift_accuracy_before_finetune": _mean(next(iter(p["results"].values()))["digits"]["shift_accuracy_before"]
                                                for p in per_seed.values()),
        "fisher": cfg.estimator.fisher,
    }
    baseline = "magnitude" if "magnitude" in table else None
    return MethodMetrics(method="model_shapley", profile=profile, headline=headline, baseline=baseline,
                         primary_metric=PRIMARY, higher_is_better=True, rows=table, details=details,
                         claims=shapley_claims.evaluate(seed_tables))
