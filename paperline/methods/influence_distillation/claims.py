"""Influence Distillation's claims (Nikdan et al., *Efficient Data Selection at Scale via Influence
Distillation*), in our words:

1. (the trivial baseline) A selection by Influence Distillation fine-tunes to a lower loss and a
   higher accuracy on the target tasks than a random selection of the same budget.
2. It matches the exact first-order influence it approximates (the expensive oracle, every pool
   sample's gradient) at a fraction of the oracle's gradients: on par in target loss (the engine
   states no margin, so "on par" reads `inconclusive`, a clear loss `reversed`).
3. It selects at least as well as RDS+ (model-embedding cosine), the paper's strongest cheap
   baseline: a lower target loss.
4. At a small learning rate the first-order influence is the second-order quadratic program's
   solution: on the convex check (logistic regression, the QP solved exactly) the two weight
   vectors agree, a deterministic figure checked to a tolerance.

The selection claims are paired by fine-tuning seed (batch order, and the random selection's own
draw); the warm-up and the targeted selections are made once (the tulu-select stage), so the
seeds measure the fine-tuning's noise and random selection's, not the warm-up's.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from paperline.claims import Claim, ClaimSpec

METHOD = "influence_distillation"
# the convex check's relative weight difference ||w2 - w1|| / ||w1|| at its smallest learning rate:
# the second-order term is O(lr) against the first, so at lr 1e-3 a percent is generous
QP_TOLERANCE = 0.01

SELECTION_SPECS: tuple[ClaimSpec, ...] = (
    ClaimSpec(name="id_below_random_target_loss", claim="lower target loss than random selection",
              metric="target_loss_mean", method=METHOD, versus="random", direction="lower", trivial=True),
    ClaimSpec(name="id_above_random_target_accuracy", claim="higher target accuracy than random selection",
              metric="target_accuracy_mean", method=METHOD, versus="random", direction="higher", trivial=True),
    ClaimSpec(name="id_on_par_with_exact_target_loss",
              claim="target loss on par with the exact first-order oracle (reversed: clearly above)",
              metric="target_loss_mean", method=METHOD, versus="exact_first_order", direction="lower"),
    ClaimSpec(name="id_below_rds_plus_target_loss", claim="lower target loss than RDS+ (embedding cosine)",
              metric="target_loss_mean", method=METHOD, versus="rds_plus", direction="lower"),
)
QP_SPEC = ClaimSpec(name="qp_first_order_matches_second_order", claim="first order = the QP's solution at small lr",
                    metric="qp_relative_weight_difference_smallest_lr", method="qp_check", versus="")
SPECS: tuple[ClaimSpec, ...] = (*SELECTION_SPECS, QP_SPEC)


def evaluate(per_seed: Mapping[str, Mapping[Any, Mapping[str, Any]]], qp_smallest_lr_difference: float
             ) -> list[Claim]:
    """The selection claims whose two selections ran, from {method: {seed: row}}, and the convex
    check's relative weight difference at its smallest learning rate."""
    def values(method: str, metric: str) -> dict:
        return {seed: row[metric] for seed, row in per_seed.get(method, {}).items() if metric in row}

    claims = [spec.paired(values(spec.method, spec.metric), values(spec.versus, spec.metric))
              for spec in SELECTION_SPECS if per_seed.get(spec.method) and per_seed.get(spec.versus)]
    return claims + [QP_SPEC.exact(qp_smallest_lr_difference, 0.0, QP_TOLERANCE)]
