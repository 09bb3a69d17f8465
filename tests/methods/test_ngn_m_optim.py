"""NGN, NGN-M and NGN-MD: the update rules against hand computations, the step-size bounds,
the overflow-safe form, the global gradient norm, and clear errors on bad input."""
from __future__ import annotations

import math
import random

import pytest
import torch

from paperline.methods.ngn_m.optimizers import make_optimizer
from paperline.optim.ngn import NGN, NGNM, ngn_step_size
from paperline.optim.ngn_md import NGNMD


def shifted_quadratic(x: torch.Tensor) -> torch.Tensor:
    """f(x) = ½‖x‖² + 1 ≥ 0, g = x: γ changes from step to step (f ≠ ½‖g‖²)."""
    return 0.5 * x.square().sum() + 1.0


def take_step(opt, params, f=shifted_quadratic):
    def closure():
        opt.zero_grad()
        loss = f(*params)
        loss.backward()
        return loss

    return opt.step(closure)


def test_ngn_m_two_steps_match_the_hand_computation():
    x = torch.tensor([3.0, 4.0], dtype=torch.float64, requires_grad=True)
    opt = NGNM([x], c=1.0, momentum=0.5)
    # step 0: f = 13.5, ‖g‖² = 25, γ = 2·13.5/(27 + 25) = 27/52; m = ½·γ·g
    take_step(opt, [x])
    g0 = 27 / 52
    m0 = [0.5 * g0 * 3, 0.5 * g0 * 4]
    x1 = [3 - m0[0], 4 - m0[1]]  # = (231, 308)/104
    assert opt.last_gamma == [pytest.approx(g0, rel=1e-14)]
    assert x.tolist() == pytest.approx(x1, rel=1e-14)
    # step 1: ‖g‖ = 385/104, f = ½(385/104)² + 1 = 169857/21632, γ = 2f/(2f + ‖g‖²) = 169857/318082
    take_step(opt, [x])
    g1 = 169857 / 318082
    m1 = [0.5 * m0[i] + 0.5 * g1 * x1[i] for i in range(2)]
    assert opt.last_gamma == [pytest.approx(g1, rel=1e-14)]
    assert x.tolist() == pytest.approx([x1[i] - m1[i] for i in range(2)], rel=1e-14)


def test_ngn_is_sgd_with_the_ngn_step():
    x = torch.tensor([3.0, 4.0], dtype=torch.float64, requires_grad=True)
    opt = NGN([x], c=2.0)
    take_step(opt, [x])
    gamma = 2 * 2.0 * 13.5 / (2 * 13.5 + 2.0 * 25)  # = 54/77
    assert opt.last_gamma == [pytest.approx(54 / 77, rel=1e-14)] and gamma == pytest.approx(54 / 77)
    assert x.tolist() == pytest.approx([3 - 3 * 54 / 77, 4 - 4 * 54 / 77], rel=1e-14)


def test_ngn_m_buffer_form_equals_the_heavy_ball_iterate_form():
    """x_{k+1} = x_k − (1−β)γ_k g_k + β(x_k − x_{k−1}) with x_{−1} = x_0 (paper Alg. 1)."""
    torch.manual_seed(0)
    A = torch.randn(6, 4, dtype=torch.float64)
    b = torch.randn(6, dtype=torch.float64)

    def f(w):
        return 0.5 * (A @ w - b).square().mean()

    w = torch.zeros(4, dtype=torch.float64, requires_grad=True)
    opt, beta = NGNM([w], c=0.7, momentum=0.9), 0.9
    prev = cur = torch.zeros(4, dtype=torch.float64)
    for _ in range(25):
        take_step(opt, [w], f)
        wk = cur.clone().requires_grad_()
        loss = f(wk)
        (g,) = torch.autograd.grad(loss, wk)
        gamma = ngn_step_size(0.7, loss.item(), g.square().sum().item())
        prev, cur = cur, cur - (1 - beta) * gamma * g + beta * (cur - prev)
        assert torch.allclose(w.detach(), cur, rtol=1e-12, atol=1e-14)


def test_ngn_md_first_step_matches_the_hand_computation():
    x = torch.tensor([3.0, -4.0], dtype=torch.float64, requires_grad=True)
    opt = NGNMD([x], c=1.0, betas=(0.9, 0.999), eps=1e-12)
    take_step(opt, [x])
    # k = 1: v̂ = g², D = |g| + ε, Σ g²/D = 3 + 4 = 7; γ = 2·13.5/(27 + 7) = 27/34
    # m = (1 − β₁)·γ·g/D = 0.1·(27/34)·sign(g)
    gamma = 27 / 34
    assert opt.last_gamma == [pytest.approx(gamma, rel=1e-10)]
    assert x.tolist() == pytest.approx([3 - 0.1 * gamma, -4 + 0.1 * gamma], rel=1e-10)
    assert opt.last_step_cap == pytest.approx(27 / 7, rel=1e-10)  # 2f / Σ g²/D


def test_ngn_md_second_step_and_decoupled_weight_decay():
    x = torch.tensor([3.0, -4.0], dtype=torch.float64, requires_grad=True)
    c, lam, b1, b2, eps = 0.5, 0.1, 0.9, 0.99, 1e-12
    opt = NGNMD([x], c=c, betas=(b1, b2), eps=eps, weight_decay=lam)
    ref = torch.tensor([3.0, -4.0], dtype=torch.float64)
    v = m = torch.zeros(2, dtype=torch.float64)
    for k in (1, 2):
        take_step(opt, [x])
        g, f = ref.clone(), float(shifted_quadratic(ref))
        v = b2 * v + (1 - b2) * g * g
        D = (v / (1 - b2 ** k)).sqrt() + eps
        gamma = 2 * c * f / (2 * f + c * float((g * g / D).sum()))
        ref = (1 - c * lam) * ref
        m = b1 * m + (1 - b1) * gamma * g / D
        ref = ref - m
        assert opt.last_gamma[0] == pytest.approx(gamma, rel=1e-12)
        assert torch.allclose(x.detach(), ref, rtol=1e-12)


@pytest.mark.parametrize("make", [lambda p, c: NGN(p, c=c), lambda p, c: NGNM(p, c=c, momentum=0.9),
                                  lambda p, c: NGNMD(p, c=c)])
def test_gamma_never_exceeds_c_nor_the_polyak_cap(make):
    torch.manual_seed(1)
    A = torch.randn(20, 5)
    y = torch.randn(20)
    for c in (1e-4, 1e-2, 1.0, 1e2, 1e4):
        w = torch.randn(5, requires_grad=True)
        opt = make([w], c)
        for _ in range(30):
            take_step(opt, [w], lambda w: 0.5 * (A @ w - y).square().mean())
            (gamma,) = opt.last_gamma
            assert 0 < gamma <= c * (1 + 1e-12)
            assert gamma <= opt.last_step_cap * (1 + 1e-12)


def test_step_size_bounds_and_limit_on_random_values():
    rng = random.Random(0)
    for _ in range(2000):
        c, f, s = 10 ** rng.uniform(-6, 6), 10 ** rng.uniform(-8, 8), 10 ** rng.uniform(-8, 8)
        gamma = ngn_step_size(c, f, s)
        assert gamma <= c * (1 + 1e-12) and gamma <= 2 * f / s * (1 + 1e-12)
    # γ → c as ‖g‖ → 0: c − γ = c²s/(2f + cs) ≤ c²s/(2f)
    for s in (1e-2, 1e-4, 1e-8, 1e-12, 0.0):
        assert 0 <= 3.0 - ngn_step_size(3.0, 0.5, s) <= 9.0 * s / 1.0 + 1e-15
    assert ngn_step_size(3.0, 0.0, 0.0) == 3.0  # f = 0 and g = 0: the limit value


def test_overflow_safe_form_equals_the_plain_form():
    rng = random.Random(1)
    for _ in range(2000):
        c, f, s = 10 ** rng.uniform(-6, 6), 10 ** rng.uniform(-8, 8), 10 ** rng.uniform(-8, 8)
        plain = c / (1 + c * s / (2 * f))
        assert ngn_step_size(c, f, s) == pytest.approx(plain, rel=1e-12)
    # where the plain form divides by f = 0, the safe form gives the limit 0 (the Polyak cap)
    with pytest.raises(ZeroDivisionError):
        1.0 / (1 + 1.0 * 2.0 / (2 * 0.0))
    assert ngn_step_size(1.0, 0.0, 2.0) == 0.0


def test_one_gamma_from_the_global_norm_over_parameter_groups():
    a = torch.tensor([3.0], dtype=torch.float64, requires_grad=True)
    b = torch.tensor([4.0], dtype=torch.float64, requires_grad=True)
    opt = NGN([{"params": [a]}, {"params": [b], "c": 2.0}], c=1.0)
    take_step(opt, [a, b], lambda a, b: 0.5 * (a.square() + b.square()).sum() + 1.0)
    # ‖g‖² = 25 over both groups (not 9 and 16 per group); f = 13.5
    assert opt.last_gamma == pytest.approx([27 / 52, 54 / 77], rel=1e-14)
    assert a.item() == pytest.approx(3 - 3 * 27 / 52) and b.item() == pytest.approx(4 - 4 * 54 / 77)


def test_state_dict_round_trip_continues_identically():
    def run(split: bool):
        w = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64, requires_grad=True)
        opt = NGNMD([w], c=0.3)
        for k in range(6):
            if split and k == 3:
                state = opt.state_dict()
                w = w.detach().clone().requires_grad_()
                opt = NGNMD([w], c=0.3)
                opt.load_state_dict(state)
            take_step(opt, [w])
        return w.detach()

    assert torch.equal(run(False), run(True))


@pytest.mark.parametrize("build, message", [
    (lambda p: NGN(p, c=0.0), "c must be a finite number > 0"),
    (lambda p: NGN(p, c=-1e-3), "c must be a finite number > 0"),
    (lambda p: NGNM(p, c=float("inf")), "c must be a finite number > 0"),
    (lambda p: NGNM(p, c=1.0, momentum=1.0), "momentum must lie in [0, 1)"),
    (lambda p: NGNMD(p, c=1.0, betas=(0.9, 1.5)), "betas[1] must lie in [0, 1)"),
    (lambda p: NGNMD(p, c=1.0, eps=0.0), "eps must be a finite number > 0"),
    (lambda p: NGNM(p, c=10.0, weight_decay=0.2), "c·weight_decay < 1"),
    (lambda p: NGN([{"params": p, "c": -2.0}], c=1.0), "c must be a finite number > 0"),
    (lambda p: make_optimizer("sgd", p, 0.0), "must be a finite number > 0"),
    (lambda p: make_optimizer("adam", p, -1e-3), "must be a finite number > 0"),
    (lambda p: make_optimizer("lion", p, 1e-3), "unknown optimizer"),
])
def test_bad_hyperparameters_are_clear_errors(build, message):
    with pytest.raises(ValueError, match=None) as err:
        build([torch.zeros(2, requires_grad=True)])
    assert message in str(err.value)


@pytest.mark.parametrize("cls", [NGN, NGNM, NGNMD])
def test_bad_losses_are_clear_errors(cls):
    w = torch.ones(2, requires_grad=True)
    opt = cls([w], c=1.0)
    with pytest.raises(TypeError, match="needs a closure"):
        opt.step()
    for bad in (-0.5, math.nan, math.inf):
        def closure(bad=bad):
            opt.zero_grad()
            loss = w.sum() * 0 + bad
            loss.backward()
            return loss

        with pytest.raises(ValueError, match="finite number ≥ 0"):
            opt.step(closure)
    assert torch.equal(w.detach(), torch.ones(2))  # nothing moved


def test_the_step_returns_the_closure_loss_and_baselines_share_the_api():
    for name in ("sgd", "sgdm", "adam", "ngn", "ngn_m", "ngn_md"):
        w = torch.tensor([3.0, 4.0], requires_grad=True)
        opt = make_optimizer(name, [w], 0.1)
        loss = take_step(opt, [w])
        assert loss.item() == pytest.approx(13.5)
        assert shifted_quadratic(w).item() < 13.5
