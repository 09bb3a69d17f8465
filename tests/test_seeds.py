"""paperline.seeds.mean_over_seeds: the mean over seeds and the sample std, by hand."""
import math

import pytest

from paperline.seeds import mean_over_seeds


def test_mean_and_sample_std_over_the_seeds_that_have_each_figure():
    rows = [{"acc": 1.0, "hard": 2.0, "steps": 5}, {"acc": 3.0, "steps": 5}, {"acc": 5.0, "hard": 4.0, "steps": 5}]
    out = mean_over_seeds(rows, spread=lambda k: k != "steps")
    assert list(out) == ["acc", "hard", "steps", "acc_std", "hard_std"]  # means first, then spreads
    assert out["acc"] == 3.0 and out["acc_std"] == 2.0  # sqrt((4 + 0 + 4) / (3 - 1)); the population std is 1.63
    # a figure seed 1 lacks: over seeds 0 and 2 only
    assert out["hard"] == 3.0 and out["hard_std"] == pytest.approx(math.sqrt(2))
    assert out["steps"] == 5.0 and isinstance(out["steps"], float)


def test_one_seed_has_no_spread_and_shared_figures_can_stay_as_they_are():
    assert mean_over_seeds([{"acc": 0.25, "n": 3}]) == {"acc": 0.25, "n": 3.0, "acc_std": 0.0, "n_std": 0.0}
    out = mean_over_seeds([{"acc": 0.25, "n": 3}, {"acc": 0.5, "n": 3}], keep_shared=True)
    assert out["n"] == 3 and isinstance(out["n"], int) and out["n_std"] == 0.0
    assert out["acc"] == 0.375 and out["acc_std"] == pytest.approx(0.125 * math.sqrt(2))
