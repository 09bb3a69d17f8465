"""A validation sweep over learning rates, one rule for every method that tunes: each rate of the
grid is fitted and scored, the best ranks lowest (`loss_rank`: a diverged run last, where a bare
`min` would let a NaN win or lose by its position, NaN comparing false both ways), and where the
best is an end of what was tried the sweep goes one step past it (`past_edge`), a given number of
times. Users: GeoAda's fine-tuning, LEFF's tuning runs."""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

Result = TypeVar("Result")


def loss_rank(validation_loss: float) -> float:
    """`validation_loss` as a sweep ranks it: itself, or +inf for a diverged run."""
    return validation_loss if math.isfinite(validation_loss) else math.inf


def past_edge(rates: Iterable[float], best: float) -> float | None:
    """The next rate past the sweep's edge where `best` (the rate the sweep chose) is the highest
    tried or the lowest, by the step between that edge and its neighbour (a geometric grid extends
    by its ratio, an uneven one by its own last step); None where `best` is interior (its optimum
    bracketed) or one rate alone was tried."""
    tried = sorted(set(rates))
    if len(tried) < 2:
        return None
    if best == tried[-1]:
        return best * (tried[-1] / tried[-2])
    if best == tried[0]:
        return best / (tried[1] / tried[0])
    return None


def best_rate(tried: Mapping[float, Result], rank: Callable[[Result], Any]) -> float:
    """The rate whose result ranks lowest (the first tried on a tie)."""
    return min(tried, key=lambda lr: rank(tried[lr]))


def sweep(rates: Iterable[float], fit: Callable[[float], Result], rank: Callable[[Result], Any],
          extend: int = 0) -> dict[float, Result]:
    """{rate: fit(rate)} for every rate of `rates`, then, up to `extend` times, for the rate one step
    past the edge the best (`best_rate` by `rank`) sits on, while it sits on one."""
    tried = {lr: fit(lr) for lr in rates}
    for _ in range(extend):
        step = past_edge(tried, best_rate(tried, rank))
        if step is None:
            break
        tried[step] = fit(step)
    return tried
