"""A validation sweep over learning rates, one rule for every method that tunes: the lowest
validation loss wins and a diverged run (NaN or infinite loss) ranks last, where a bare `min` would
let a NaN win or lose by its position (NaN compares false both ways); where the winner sits on the
sweep's edge, the sweep goes one step past it (`next_rate`)."""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping


def loss_rank(validation_loss: float) -> float:
    """`validation_loss` as a sweep ranks it: itself, or +inf for a diverged run."""
    return validation_loss if math.isfinite(validation_loss) else math.inf


def past_edge(rates: Iterable[float], best: float, ratio: float | None = None) -> float | None:
    """The next rate past the sweep's edge where `best` (the rate the sweep chose) is the highest
    tried (× ratio) or the lowest (÷ ratio); None where it is interior (its optimum bracketed) or
    one rate alone was tried. `ratio` None: the step between the edge and its neighbour, so an
    uneven grid extends by its own last step."""
    tried = sorted(set(rates))
    if len(tried) < 2:
        return None
    if best == tried[-1]:
        return best * (ratio if ratio is not None else tried[-1] / tried[-2])
    if best == tried[0]:
        return best / (ratio if ratio is not None else tried[1] / tried[0])
    return None


def next_rate(validation: Mapping[float, float], ratio: float | None = None) -> float | None:
    """`past_edge` for a sweep given as {rate: validation loss}, the best rate by `loss_rank`."""
    if len(validation) < 2:
        return None
    return past_edge(validation, min(validation, key=lambda lr: loss_rank(validation[lr])), ratio)
