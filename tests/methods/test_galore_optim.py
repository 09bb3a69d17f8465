"""GaLore-AdamW as the official galore_torch.AdamW + GaLoreProjector ("std") compute it, each on a
small case worked by hand: a square weight is projected on its right side, the weight decay comes
after the step, the denominator is √v + ε (ε = 1e-6) before the bias correction, and the groups
without a projection get that same AdamW (not torch's)."""
from __future__ import annotations

import math

import pytest
import torch

from paperline.optim.galore import GaLoreAdamW
from paperline.optim.hybrid import state_numel

BETA1, BETA2 = 0.9, 0.999


def _matrix(values) -> torch.nn.Parameter:
    return torch.nn.Parameter(torch.tensor(values, dtype=torch.float64))


def test_a_square_weight_is_projected_on_its_right_side():
    # G = u·5·vᵀ with u = (0.6, 0.8), v = (1, 0). Right side (official, rows ≥ columns): the low-rank
    # gradient G·v = (3, 4)ᵀ, Adam's first step is its sign (1, 1), back: (1, 1)ᵀ·vᵀ = [[1, 0], [1, 0]].
    # The left side would give uᵀG = (5, 0) → sign (1, 0) → u·(1, 0) = [[0.6, 0], [0.8, 0]].
    W = _matrix([[0.0, 0.0], [0.0, 0.0]])
    opt = GaLoreAdamW([W], lr=0.1, rank=1, alpha=0.5, eps=1e-12)
    W.grad = torch.tensor([[3.0, 0.0], [4.0, 0.0]], dtype=torch.float64)
    opt.step()
    torch.testing.assert_close(W.detach(), -0.05 * torch.tensor([[1.0, 0.0], [1.0, 0.0]], dtype=torch.float64),
                               atol=1e-9, rtol=0)
    assert opt.state[W]["exp_avg"].shape == (1, 2)  # r × l: the moments live on the projected side


def test_a_wide_weight_is_projected_on_its_left_side():
    # G = u·5·vᵀ, 2×3, u = (0.6, 0.8), v = (1, 0, 0): rows < columns, so uᵀG = (5, 0, 0) → u·(1, 0, 0)
    W = _matrix([[0.0] * 3, [0.0] * 3])
    opt = GaLoreAdamW([W], lr=0.1, rank=1, alpha=0.5, eps=1e-12)
    W.grad = torch.tensor([[3.0, 0.0, 0.0], [4.0, 0.0, 0.0]], dtype=torch.float64)
    opt.step()
    torch.testing.assert_close(W.detach(), -0.05 * torch.tensor([[0.6, 0, 0], [0.8, 0, 0]], dtype=torch.float64),
                               atol=1e-9, rtol=0)


def test_weight_decay_comes_after_the_step():
    # W = 2 everywhere, lr 0.1, α 0.5, wd 0.5: step to W − 0.05·[[1, 0], [1, 0]], then × (1 − 0.1·0.5) = 0.95:
    # 1.95·0.95 = 1.8525 where the step lands. Decay first would give 2·0.95 − 0.05 = 1.85 there.
    W = _matrix([[2.0, 2.0], [2.0, 2.0]])
    b = torch.nn.Parameter(torch.tensor([2.0], dtype=torch.float64))
    opt = GaLoreAdamW([{"params": [W]}, {"params": [b], "adamw": True}], lr=0.1, rank=1, alpha=0.5, eps=1e-12,
                      weight_decay=0.5)
    W.grad = torch.tensor([[3.0, 0.0], [4.0, 0.0]], dtype=torch.float64)
    b.grad = torch.tensor([1.0], dtype=torch.float64)
    opt.step()
    torch.testing.assert_close(W.detach(), torch.tensor([[1.8525, 1.9], [1.8525, 1.9]], dtype=torch.float64),
                               atol=1e-9, rtol=0)
    torch.testing.assert_close(b.detach(), torch.tensor([(2.0 - 0.1) * 0.95], dtype=torch.float64),
                               atol=1e-9, rtol=0)  # 1.805 (decay first: 1.8)


def test_unprojected_parameters_get_galores_own_adamw_with_eps_before_the_bias_correction():
    # Step 1 with g = ε = 1e-6 (the default): m = 0.1·g, v = 0.001·g², denominator √v + ε, step size
    # lr·√0.001/0.1: the step is lr·√0.001/(√0.001 + 1) = 0.030653·lr. Torch's AdamW (ε after the bias
    # correction) steps lr·g/(g + ε) = 0.5·lr.
    b = torch.nn.Parameter(torch.tensor([0.0, 0.0], dtype=torch.float64))
    W = _matrix([[0.0, 0.0], [0.0, 0.0]])
    opt = GaLoreAdamW([{"params": [W]}, {"params": [b], "adamw": True}], lr=1.0, rank=1)
    g1, g2 = torch.tensor([1e-6, -2e-6], dtype=torch.float64), torch.tensor([3e-6, 1e-6], dtype=torch.float64)
    b.grad = g1
    opt.step()
    first = math.sqrt(1 - BETA2) / (math.sqrt(1 - BETA2) + 1.0)
    assert first == pytest.approx(0.0306534, abs=1e-7)
    second_of_0 = -math.sqrt(1 - BETA2) * 2 / (math.sqrt(1 - BETA2) * 2 + 1.0)
    torch.testing.assert_close(b.detach(), torch.tensor([-first, -second_of_0], dtype=torch.float64),
                               atol=1e-12, rtol=0)
    # step 2: m = β1(1−β1)g1 + (1−β1)g2, v = β2(1−β2)g1² + (1−β2)g2², step lr·√(1−β2²)/(1−β1²)·m/(√v + ε)
    before = b.detach().clone()
    b.grad = g2
    opt.step()
    m = BETA1 * (1 - BETA1) * g1 + (1 - BETA1) * g2
    v = BETA2 * (1 - BETA2) * g1 ** 2 + (1 - BETA2) * g2 ** 2
    expected = before - math.sqrt(1 - BETA2 ** 2) / (1 - BETA1 ** 2) * m / (v.sqrt() + 1e-6)
    torch.testing.assert_close(b.detach(), expected, atol=1e-12, rtol=0)
    assert state_numel(opt, [b]) == 2 * 2 and opt.state[b]["step"] == 2


def test_projected_step_uses_eps_before_the_bias_correction():
    # the square case above with a tiny gradient: G·v = (3, 4)ᵀ·1e-6, the default ε = 1e-6; each entry
    # steps lr·α·√0.001·|g|/(√0.001·|g| + ε) along the right singular vector
    W = _matrix([[0.0, 0.0], [0.0, 0.0]])
    opt = GaLoreAdamW([W], lr=1.0, rank=1, alpha=1.0)
    W.grad = 1e-6 * torch.tensor([[3.0, 0.0], [4.0, 0.0]], dtype=torch.float64)
    opt.step()
    s = math.sqrt(1 - BETA2)
    expected = [[-s * 3 / (s * 3 + 1), 0.0], [-s * 4 / (s * 4 + 1), 0.0]]
    torch.testing.assert_close(W.detach(), torch.tensor(expected, dtype=torch.float64), atol=1e-12, rtol=0)
