"""The learning-rate sweep's rules (paperline/sweep.py), shared by GeoAda and LEFF."""
from __future__ import annotations

import math

from paperline.sweep import loss_rank, next_rate, past_edge


def test_a_sweep_goes_past_the_edge_its_best_rate_sits_on_by_the_grids_own_step_there():
    assert past_edge([3e-5, 1e-4, 3e-4, 1e-3], 3e-5) == 3e-5 / (1e-4 / 3e-5)
    assert past_edge([3e-5, 1e-4, 3e-4, 1e-3], 1e-3) == 1e-3 * (1e-3 / 3e-4)
    assert past_edge([3e-5, 1e-4, 3e-4, 1e-3], 1e-4) is None  # interior: bracketed
    assert past_edge([1e-3, 4e-3], 1e-3, ratio=4.0) == 1e-3 / 4  # a given ratio wins
    assert past_edge([1e-3], 1e-3) is None
    assert next_rate({1e-3: 0.5, 4e-3: math.nan, 1.6e-2: 0.3}) == 1.6e-2 * 4  # NaN ranks last
    assert loss_rank(math.nan) == math.inf and loss_rank(0.5) == 0.5
