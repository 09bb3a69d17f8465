"""Ranking the points of a validation sweep (a learning rate per point), one rule for every method
that tunes: the lowest validation loss wins and a diverged run (NaN or infinite loss) ranks last,
where a bare `min` would let a NaN win or lose by its position (NaN compares false both ways)."""
from __future__ import annotations

import math


def loss_rank(validation_loss: float) -> float:
    """`validation_loss` as a sweep ranks it: itself, or +inf for a diverged run."""
    return validation_loss if math.isfinite(validation_loss) else math.inf
