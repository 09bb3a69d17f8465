"""The matrix optimizers: SUMO's update is exactly Q·UVᵀ plus the out-of-subspace gradient, its moment
is transported when the subspace changes, state sizes equal the spec's formulas counted from the
state tensors, the limiter acts, bad input fails clearly; GaLore-AdamW and Muon against references."""
from __future__ import annotations

import copy

import pytest
import torch

from paperline.methods.sumo.optimizers import matrix_state_formula
from paperline.optim.galore import GaLoreAdamW
from paperline.optim.hybrid import state_numel
from paperline.optim.muon import Muon, newton_schulz
from paperline.optim.sumo import SUMO, orthogonalize_svd, randomized_left_singular_vectors, transport_moment


def _param(m: int, n: int, seed: int = 0) -> torch.nn.Parameter:
    return torch.nn.Parameter(torch.randn(m, n, generator=torch.Generator().manual_seed(seed)))


def _grad(m: int, n: int, seed: int) -> torch.Tensor:
    return torch.randn(m, n, generator=torch.Generator().manual_seed(1000 + seed))


def test_orthogonalize_svd_is_exactly_uv_transpose():
    M = torch.randn(6, 40, generator=torch.Generator().manual_seed(1))
    U, _, Vh = torch.linalg.svd(M.double(), full_matrices=False)
    O = orthogonalize_svd(M)
    torch.testing.assert_close(O.double(), U @ Vh, atol=1e-5, rtol=0)
    torch.testing.assert_close(O @ O.T, torch.eye(6), atol=1e-5, rtol=0)  # singular values all 1


@pytest.mark.parametrize("shape", [(12, 30), (30, 12)])  # projector on the shorter side either way
def test_sumo_step_is_alpha_lr_times_q_uvT_plus_residual(shape):
    m, n = shape
    W = _param(m, n)
    opt = SUMO([W], lr=0.1, rank=3, update_period=100, alpha=0.25, momentum=0.9, limiter=None)
    before = W.detach().clone()
    grads = [_grad(m, n, s) for s in range(3)]
    for g in grads:
        before = W.detach().clone()
        W.grad = g.clone()
        opt.step()
    state = opt.state[W]
    Q = state["projector"]  # s×r, fixed since step 0 (update_period 100)
    G = grads[-1].T if m > n else grads[-1]
    # the moment by its recursion, independently of the optimizer: M = Σ μ^(t-i) QᵀG_i
    M = torch.zeros(3, max(m, n))
    for g in grads:
        M = 0.9 * M + Q.T @ (g.T if m > n else g)
    torch.testing.assert_close(state["moment"], M, atol=1e-5, rtol=1e-5)
    U, _, Vh = torch.linalg.svd(M.double(), full_matrices=False)
    update = Q.double() @ (U @ Vh) + (G.double() - Q.double() @ (Q.double().T @ G.double()))
    if m > n:
        update = update.T
    torch.testing.assert_close((before - W.detach()).double(), 0.25 * 0.1 * update, atol=1e-6, rtol=1e-5)


def test_randomized_svd_finds_the_top_subspace():
    gen = torch.Generator().manual_seed(2)
    A = torch.randn(40, 5, generator=gen) @ torch.randn(5, 200, generator=gen) + 1e-3 * torch.randn(40, 200, generator=gen)
    Q = randomized_left_singular_vectors(A, 5, oversample=5, power_iters=2, generator=torch.Generator().manual_seed(0))
    U = torch.linalg.svd(A).U[:, :5]
    torch.testing.assert_close(Q.T @ Q, torch.eye(5), atol=1e-5, rtol=0)
    assert (Q @ Q.T - U @ U.T).norm() < 1e-3


def test_transport_keeps_the_full_space_moment_when_the_basis_rotates():
    gen = torch.Generator().manual_seed(3)
    Q_old = torch.linalg.qr(torch.randn(20, 4, generator=gen)).Q
    R = torch.linalg.qr(torch.randn(4, 4, generator=gen)).Q  # same subspace, another basis
    Q_new = Q_old @ R
    M = torch.randn(4, 30, generator=gen)
    moved = transport_moment(M, Q_old, Q_new)
    torch.testing.assert_close(Q_new @ moved, Q_old @ M, atol=1e-5, rtol=0)
    # without transport the same coordinates in the new basis are another moment
    assert (Q_new @ M - Q_old @ M).norm() > 0.1 * M.norm()


def test_sumo_transports_its_moment_when_the_subspace_changes():
    W = _param(10, 25)
    opt = SUMO([W], lr=0.01, rank=3, update_period=2, momentum=0.8, limiter=None)
    for s in range(2):
        W.grad = _grad(10, 25, s)
        opt.step()
    old_Q, old_M = opt.state[W]["projector"].clone(), opt.state[W]["moment"].clone()
    g = _grad(10, 25, 2)
    W.grad = g.clone()
    opt.step()  # step 2: a new subspace
    new_Q = opt.state[W]["projector"]
    assert (new_Q @ new_Q.T - old_Q @ old_Q.T).norm() > 1e-3  # the subspace did change
    expected = 0.8 * (new_Q.T @ old_Q) @ old_M + new_Q.T @ g
    torch.testing.assert_close(opt.state[W]["moment"], expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("shape", [(16, 40), (40, 16)])
def test_state_sizes_equal_the_spec_formulas(shape):
    m, n = shape
    r = 4
    for name, make in [("sumo", lambda p: SUMO([p], rank=r, update_period=3)),
                       ("sumo_ns", lambda p: SUMO([p], rank=r, update_period=3, orthogonalization="newton_schulz")),
                       ("galore_adamw", lambda p: GaLoreAdamW([p], rank=r, update_period=3)),
                       ("muon", lambda p: Muon([p])),
                       ("adamw", lambda p: torch.optim.AdamW([p]))]:
        W = _param(m, n)
        opt = make(W)
        for s in range(4):  # across a subspace change
            W.grad = _grad(m, n, s)
            opt.step()
        assert state_numel(opt) == matrix_state_formula(name, (m, n), r), name
    s_, l_ = min(m, n), max(m, n)
    assert matrix_state_formula("sumo", (m, n), r) == l_ * r + s_ * r  # n·r + m·r (spec, m ≤ n)
    assert matrix_state_formula("galore_adamw", (m, n), r) == 2 * l_ * r + s_ * r


def test_adamw_groups_match_torch_adamw():
    W, b = _param(8, 12), torch.nn.Parameter(torch.randn(12))
    b_ref = torch.nn.Parameter(b.detach().clone())
    opt = SUMO([{"params": [W]}, {"params": [b], "adamw": True, "lr": 3e-3, "weight_decay": 0.01}], rank=2)
    ref = torch.optim.AdamW([b_ref], lr=3e-3, weight_decay=0.01)
    for s in range(5):
        g = torch.randn(12, generator=torch.Generator().manual_seed(s))
        W.grad, b.grad, b_ref.grad = _grad(8, 12, s), g.clone(), g.clone()
        opt.step()
        ref.step()
    torch.testing.assert_close(b, b_ref, atol=1e-7, rtol=0)
    assert state_numel(opt, [b]) == 2 * 12


def test_the_limiter_caps_norm_growth_and_is_not_a_no_op():
    W = _param(6, 20)
    opt = SUMO([W], lr=1.0, rank=2, update_period=1000, alpha=1.0, momentum=0.0, limiter=1.1)
    base = _grad(6, 20, 0)
    W.grad = base.clone()
    opt.step()
    first = opt.state[W]["previous_update_norm"]
    before = W.detach().clone()
    W.grad = 10 * base  # out-of-subspace part grows tenfold: the update norm would grow > 1.1×
    opt.step()
    assert opt.state[W]["limiter_hits"] == 1
    assert (before - W.detach()).norm().item() == pytest.approx(1.1 * first, rel=1e-5)
    no_limit = SUMO([_param(6, 20)], lr=1.0, rank=2, limiter=None)
    assert no_limit.defaults["limiter"] is None


def test_galore_first_step_is_alpha_lr_p_sign_of_projected_gradient():
    W = _param(10, 30)
    opt = GaLoreAdamW([W], lr=0.01, rank=3, update_period=5, alpha=0.25, eps=1e-12)
    g = _grad(10, 30, 0)
    before = W.detach().clone()
    W.grad = g.clone()
    opt.step()
    P = torch.linalg.svd(g, full_matrices=False).U[:, :3]
    torch.testing.assert_close(opt.state[W]["projector"].abs(), P.abs(), atol=1e-5, rtol=0)
    P = opt.state[W]["projector"]
    torch.testing.assert_close(before - W.detach(), 0.01 * 0.25 * P @ torch.sign(P.T @ g), atol=1e-5, rtol=0)


def test_muon_matches_torch_muon_to_bfloat16_precision():
    W, W_ref = _param(24, 16), _param(24, 16)
    ours = Muon([W], lr=0.02, momentum=0.95, weight_decay=0.1)
    ref = torch.optim.Muon([W_ref], lr=0.02, momentum=0.95, weight_decay=0.1)
    start = W.detach().clone()
    for s in range(3):
        g = _grad(24, 16, s)
        W.grad, W_ref.grad = g.clone(), g.clone()
        ours.step()
        ref.step()
    assert ((W - W_ref).norm() / (W_ref - start).norm()).item() < 0.03  # torch runs NS in bfloat16


def test_newton_schulz_approximately_orthogonalizes_a_well_conditioned_matrix():
    M = torch.randn(8, 64, generator=torch.Generator().manual_seed(4))
    sv = torch.linalg.svdvals(newton_schulz(M))
    assert 0.6 < sv.min() and sv.max() < 1.25  # Keller Jordan's coefficients: ≈ 1, not exactly


def test_sumo_with_the_same_seed_is_deterministic_and_state_dict_resumes():
    def run(steps, opt_state=None, weights=None):
        W = torch.nn.Parameter(weights.clone()) if weights is not None else _param(12, 20)
        opt = SUMO([W], lr=0.05, rank=3, update_period=2, seed=7)
        if opt_state is not None:
            opt.load_state_dict(opt_state)
        for s in steps:
            W.grad = _grad(12, 20, s)
            opt.step()
        return W.detach().clone(), copy.deepcopy(opt.state_dict())

    full, _ = run(range(6))
    again, _ = run(range(6))
    torch.testing.assert_close(full, again, atol=0, rtol=0)
    half, state = run(range(3))
    resumed, _ = run(range(3, 6), opt_state=state, weights=half)
    torch.testing.assert_close(resumed, full, atol=0, rtol=0)


@pytest.mark.parametrize("make, message", [
    (lambda p: SUMO([p], lr=0.0), "lr must be > 0"),
    (lambda p: SUMO([p], lr=-1e-3), "lr must be > 0"),
    (lambda p: GaLoreAdamW([p], lr=0.0), "lr must be > 0"),
    (lambda p: Muon([p], lr=-0.02), "lr must be > 0"),
    (lambda p: SUMO([p], rank=9), r"rank 9 is not in \[1, min\(m, n\) = 8\].*shape \(8, 20\)"),
    (lambda p: GaLoreAdamW([p], rank=21), r"rank 21 is not in \[1, min\(m, n\) = 8\]"),
    (lambda p: SUMO([p], rank=0), "rank 0 is not in"),
    (lambda p: SUMO([p], limiter=1.0), "limiter"),
    (lambda p: SUMO([p], momentum=1.0), "momentum"),
    (lambda p: SUMO([{"params": [p]}, {"params": [torch.nn.Parameter(torch.zeros(3))]}]),
     r"shape \(3,\); a matrix group takes 2-D weights only"),
])
def test_bad_input_is_a_clear_error(make, message):
    with pytest.raises(ValueError, match=message):
        make(_param(8, 20))
