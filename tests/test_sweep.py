"""The learning-rate sweep's rules (paperline/sweep.py), shared by GeoAda and LEFF."""
from __future__ import annotations

import math

from paperline.sweep import best_rate, loss_rank, past_edge, sweep


def test_a_sweep_goes_past_the_edge_its_best_rate_sits_on_by_the_grids_own_step_there():
    assert past_edge([3e-5, 1e-4, 3e-4, 1e-3], 3e-5) == 3e-5 / (1e-4 / 3e-5)
    assert past_edge([3e-5, 1e-4, 3e-4, 1e-3], 1e-3) == 1e-3 * (1e-3 / 3e-4)
    assert past_edge([3e-5, 1e-4, 3e-4, 1e-3], 1e-4) is None  # interior: bracketed
    assert past_edge([1e-3, 4e-3], 1e-3) == 1e-3 / 4  # a geometric grid: its ratio
    assert past_edge([1e-3], 1e-3) is None
    validation = {1e-3: 0.5, 4e-3: math.nan, 1.6e-2: 0.3}
    assert past_edge(validation, best_rate(validation, loss_rank)) == 1.6e-2 * 4  # NaN ranks last
    assert loss_rank(math.nan) == math.inf and loss_rank(0.5) == 0.5


def test_a_sweep_fits_the_grid_then_steps_past_the_best_edge_until_it_is_bracketed_or_out_of_steps():
    loss = {1e-3: 0.5, 4e-3: 0.4, 1.6e-2: 0.3, 6.4e-2: 0.2, 2.56e-1: 0.25}
    fitted = []

    def fit(lr: float) -> float:
        fitted.append(lr)
        return loss[lr]

    tried = sweep([1e-3, 4e-3, 1.6e-2], fit, loss_rank, extend=5)
    assert fitted == [1e-3, 4e-3, 1.6e-2, 6.4e-2, 2.56e-1]  # bracketed after two steps up: stops there
    assert best_rate(tried, loss_rank) == 6.4e-2
    fitted.clear()
    assert list(sweep([1e-3, 4e-3, 1.6e-2], fit, loss_rank, extend=1)) == [1e-3, 4e-3, 1.6e-2, 6.4e-2]
    assert list(sweep([1e-3, 4e-3, 1.6e-2], fit, loss_rank)) == [1e-3, 4e-3, 1.6e-2]  # no extension asked
