"""Influence Distillation's claims: selections paired by fine-tuning seed (against random selection,
the exact oracle and RDS+), the convex check an exact claim; the rows the means over seeds."""
from __future__ import annotations

import statistics

import pytest

from paperline.methods.influence_distillation.claims import QP_TOLERANCE, SPECS, evaluate
from paperline.methods.influence_distillation.summary import method_metrics


def _per_seed(losses: dict[str, tuple[float, ...]]) -> dict[str, dict[str, dict]]:
    return {m: {str(s): {"target_loss_mean": loss, "target_accuracy_mean": 1.0 - loss / 4, "selection_wall_s": 2.0,
                         "share_squad_like": 0.1 * s}
                for s, loss in enumerate(ls)} for m, ls in losses.items()}


def test_specs_are_unique_and_random_selection_is_the_trivial_baseline():
    names = [s.name for s in SPECS]
    assert len(names) == len(set(names))
    assert {s.versus for s in SPECS if s.trivial} == {"random"}


def test_below_random_shown_above_the_oracle_reversed_rds_within_the_noise():
    per_seed = _per_seed({"random": (2.90, 2.85, 2.88), "influence_distillation": (2.70, 2.66, 2.71),
                          "exact_first_order": (2.55, 2.52, 2.57), "rds_plus": (2.60, 2.80, 2.62)})
    claims = {c.name: c for c in evaluate(per_seed, 5e-4)}
    assert set(claims) == {s.name for s in SPECS}
    assert claims["id_below_random_target_loss"].verdict == "shown"
    assert claims["id_below_random_target_loss"].effect == pytest.approx((-0.20 - 0.19 - 0.17) / 3)
    assert claims["id_above_random_target_accuracy"].verdict == "shown"
    assert claims["id_on_par_with_exact_target_loss"].verdict == "reversed"
    assert claims["id_below_rds_plus_target_loss"].verdict == "inconclusive"  # +0.10, -0.14, +0.09
    assert claims["qp_first_order_matches_second_order"].verdict == "exact"
    assert evaluate(per_seed, 2 * QP_TOLERANCE)[-1].verdict == "not_exact"


def test_one_seed_decides_nothing_and_a_missing_selection_is_not_claimed():
    per_seed = _per_seed({"random": (2.9,), "influence_distillation": (1.0,)})
    claims = evaluate(per_seed, 0.0)
    assert [c.name for c in claims] == ["id_below_random_target_loss", "id_above_random_target_accuracy",
                                        "qp_first_order_matches_second_order"]
    assert [c.verdict for c in claims[:2]] == ["inconclusive", "inconclusive"]


def test_rows_are_means_over_seeds_with_the_shared_cost_kept():
    per_seed = _per_seed({"random": (2.90, 2.85, 2.88), "influence_distillation": (2.70, 2.66, 2.71)})
    qp = {"rows": [{"lr": 1.0, "relative_weight_difference": 0.9, "support_jaccard": 0.5},
                   {"lr": 1e-3, "relative_weight_difference": 4e-4, "support_jaccard": 1.0}]}
    selection = {"comparison": {"cost_ratio_wall_time": 0.5}, "before_finetune": {"gsm8k_like": {"loss": 3.0}}}
    metrics = method_metrics(selection, per_seed, qp, "smoke")
    row = metrics.rows["influence_distillation"]
    assert row["target_loss_mean"] == pytest.approx(statistics.fmean((2.70, 2.66, 2.71)))
    assert row["target_loss_mean_std"] == pytest.approx(statistics.stdev((2.70, 2.66, 2.71)))
    assert row["selection_wall_s"] == 2.0 and "selection_wall_s_std" not in row and row["seeds"] == 3
    assert row["share_squad_like"] == pytest.approx(0.1)  # random's composition differs by seed: its mean
    assert metrics.headline["qp_relative_weight_difference_smallest_lr"] == 4e-4  # by lr, not by position
    assert metrics.details["per_seed"] == per_seed
    assert {c.name: c.verdict for c in metrics.claims}["id_below_random_target_loss"] == "shown"
