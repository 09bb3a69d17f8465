"""Theory check: Newton–Schulz's error grows with the moment's condition number; the exact SVD's
stays at rounding level and far below it."""
from __future__ import annotations

import torch

from paperline.methods.sumo.config import SumoConfig
from paperline.methods.sumo.theory import kappa_label, moment_with_condition_number, ns_error_vs_condition_number

GRID = {"adamw": [1e-3]}


def test_constructed_moments_have_the_prescribed_condition_number():
    M, target = moment_with_condition_number(8, 50, 1e4, torch.Generator().manual_seed(0))
    sv = torch.linalg.svdvals(M.double())
    assert abs(sv[0] / sv[-1] / 1e4 - 1) < 1e-3
    torch.testing.assert_close(target @ target.T, torch.eye(8), atol=1e-5, rtol=0)


def test_ns_error_grows_with_kappa_and_svd_stays_exact():
    cfg = SumoConfig(lr_grid=GRID, optimizers=["adamw"], condition_numbers=[1, 1e2, 1e4, 1e6],
                     theory_rank=8, theory_cols=64, theory_draws=3)
    rows = ns_error_vs_condition_number(cfg)
    ns = rows["ns5_error_mean"]
    assert ns[-1] > ns[1] and ns[2] > ns[1]  # grows once κ is past ~a^5 ≈ 500
    assert ns[-1] > 0.4  # small singular values are not pushed towards 1
    assert rows["ns5_min_singular_value"][-1] < 0.01 < rows["ns5_min_singular_value"][0]
    assert max(rows["svd_error_max"][:2]) < 1e-5  # fp32 rounding
    assert all(s < 0.1 * n for s, n in zip(rows["svd_error_max"], ns))


def test_kappa_labels_are_mlflow_safe():
    assert [kappa_label(k) for k in (1.0, 1e3, 1e6, 2.5)] == ["1", "1000", "1e6", "2.5"]
