"""Model Shapley's claims on hand-made per-seed tables: one claim per measure and comparator
(magnitude, grad·weight, OBD; random the trivial one), paired by seed, the LM loss in its own
direction (lower), fewer than three seeds never a verdict, an absent ranking's claims left out."""
from __future__ import annotations

import pytest

from paperline.methods.model_shapley.claims import SPECS, evaluate

JITTER = (0.0, 0.01, -0.005)  # ours only, so the paired differences vary from seed to seed


def _table(seed: int) -> dict:
    def row(spearman, prune, lm, jitter=0.0):
        return {"spearman_vs_shapley": spearman + 0.05 * seed + jitter,
                "prune_accuracy_auc": prune - 0.01 * seed + jitter, "lm_prune_loss_auc": lm + 0.02 * seed + jitter}
    return {"model_shapley": row(0.5, 0.60, 4.40, JITTER[seed]), "magnitude": row(0.3, 0.65, 4.41),
            "grad_weight": row(0.5, 0.60, 4.40), "obd": row(0.6, 0.70, 4.30), "random": row(0.0, 0.55, 4.50)}


def test_specs_cover_every_measure_and_comparator_once():
    names = [s.name for s in SPECS]
    assert len(names) == len(set(names)) == 12
    assert {s.versus for s in SPECS if s.trivial} == {"random"} and sum(s.trivial for s in SPECS) == 3
    assert {s.method for s in SPECS} == {"model_shapley"}
    assert all(s.direction == "lower" for s in SPECS if s.metric == "lm_prune_loss_auc")


def test_verdicts_from_three_seeds():
    seed_rows = {s: _table(s) for s in range(3)}
    seed_rows[1]["magnitude"]["lm_prune_loss_auc"] -= 0.03  # +0.01, −0.03, +0.015 lower for ours: no verdict
    claims = {c.name: c for c in evaluate(seed_rows)}
    assert claims["model_shapley_spearman_above_random"].verdict == "shown"
    assert claims["model_shapley_spearman_above_random"].trivial
    assert claims["model_shapley_spearman_above_magnitude"].effect == pytest.approx(0.2 + 0.005 / 3)
    assert claims["model_shapley_spearman_above_grad_weight"].verdict == "inconclusive"  # 0, +0.01, −0.005
    assert claims["model_shapley_prune_auc_above_obd"].verdict == "reversed"
    assert claims["model_shapley_lm_prune_loss_below_random"].verdict == "shown"  # ~0.1 lower at every seed
    assert claims["model_shapley_lm_prune_loss_below_obd"].verdict == "reversed"
    assert claims["model_shapley_lm_prune_loss_below_magnitude"].verdict == "inconclusive"


def test_two_seeds_and_absent_rankings():
    seed_rows = {s: {v: r for v, r in _table(s).items() if v != "obd"} for s in range(2)}
    claims = evaluate(seed_rows)
    assert len(claims) == 9 and all(c.verdict == "inconclusive" and c.seeds == 2 for c in claims)
    assert not any(c.versus == "obd" for c in claims)
