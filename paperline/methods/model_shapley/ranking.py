"""Orders from importances (higher: more important), one rule for every model: pruning keeps the
most important units, selection takes the most important; ties go by unit index."""
from __future__ import annotations

import math

import torch


def keep_masks(importance: torch.Tensor, fractions: list[float]) -> torch.Tensor:
    """(len(fractions), units) masks: the ⌊f·units⌉ least important units removed at each fraction
    (ties: the lower index is removed first, so equal scores give one order)."""
    units = len(importance)
    order = sorted(range(units), key=lambda u: (float(importance[u]), u))
    masks = torch.ones(len(fractions), units, dtype=torch.bool)
    for row, f in enumerate(fractions):
        masks[row, order[:round(f * units)]] = False
    return masks


def top_units(importance: torch.Tensor, fraction: float) -> list[int]:
    """The ⌈fraction·units⌉ most important units (ties: lower index first)."""
    k = max(1, math.ceil(fraction * len(importance) - 1e-9))
    return sorted(sorted(range(len(importance)), key=lambda u: (-float(importance[u]), u))[:k])
