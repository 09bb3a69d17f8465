import math

import pytest
import torch

from paperline.methods.dnc import metrics, theory

K, n = 5, 4


def etf_means(d: int) -> torch.Tensor:
    """d×K centred simplex means (needs d ≥ K)."""
    return torch.eye(d, K, dtype=torch.float64) @ (torch.eye(K, dtype=torch.float64) - 1.0 / K)


def test_dnc_Z_has_the_dnc_signature():
    Z = theory.dnc_Z(K, n, 3.0)
    sv = metrics.singular_values(Z)
    assert metrics.numerical_rank(sv, 1e-3) == metrics.numerical_rank(sv, 1e-2) == K - 1
    assert torch.allclose(sv[: K - 1], sv[0].expand(K - 1))
    assert metrics.nc2_etf(Z, K) < 1e-12
    assert metrics.nc1(Z, K) < 1e-20 and metrics.nc1_trace(Z, K) < 1e-20
    assert metrics.effective_rank(sv) == pytest.approx(K - 1)
    assert metrics.stable_rank(sv) == pytest.approx(K - 1)


def test_cosine_Z_is_collapsed_but_not_an_etf():
    Z = theory.cosine_Z(K, n, 2.0)
    assert metrics.numerical_rank(metrics.singular_values(Z), 1e-3) == 2
    assert metrics.nc1_trace(Z, K) < 1e-20
    assert metrics.nc2_etf(Z, K) > 0.3


def test_nc1_zero_for_collapsed_features_and_large_for_random_ones():
    gen = torch.Generator().manual_seed(0)
    collapsed = etf_means(8).repeat_interleave(n, dim=1)
    assert metrics.nc1(collapsed, K) < 1e-20 and metrics.nc1_trace(collapsed, K) < 1e-20
    noisy = collapsed + 1e-3 * torch.randn(collapsed.shape, generator=gen, dtype=torch.float64)
    assert 1e-8 < metrics.nc1_trace(noisy, K) < 1e-4
    random = torch.randn(8, K * n, generator=gen, dtype=torch.float64)
    assert metrics.nc1_trace(random, K) > 1 and metrics.nc1(random, K) > 1


def test_nc1_pinv_and_trace_forms_on_a_worked_example():
    # K = 2, n = 2 in R²: means ±e1, within-class offsets ±ε along e1 and ±η along e2
    eps, eta = 0.1, 0.3
    H = torch.tensor([[1 + eps, 1 - eps, -1 + eps, -1 - eps],
                      [eta, -eta, eta, -eta]], dtype=torch.float64)
    # Σ_W = diag(ε², η²), Σ_B = diag(1, 0): the pinv form ignores e2, the trace form does not
    assert metrics.nc1(H, 2) == pytest.approx(eps ** 2 / 2)
    assert metrics.nc1_trace(H, 2) == pytest.approx(eps ** 2 + eta ** 2)


def test_nc2_etf_and_orthogonal_frame():
    etf = etf_means(6).repeat_interleave(n, dim=1)
    frame = torch.eye(6, K, dtype=torch.float64).repeat_interleave(n, dim=1)  # one-hot means
    assert metrics.nc2_etf(etf, K) < 1e-12
    assert metrics.nc2_of(frame, K) < 1e-12
    assert metrics.nc2_etf(frame, K) < 1e-12  # centring an orthogonal frame gives a simplex ETF
    assert metrics.nc2_of(etf, K) > 0.3
    squashed = torch.diag(torch.tensor([1.0, 1, 1, 1, 0.2, 0], dtype=torch.float64)) @ etf
    assert metrics.nc2_etf(squashed, K) > 0.05


def test_nc3_forms():
    gen = torch.Generator().manual_seed(1)
    H = etf_means(6).repeat_interleave(n, dim=1)
    Mbar_T = metrics.centred_means(H, K).T
    assert metrics.nc3(3.0 * Mbar_T, H, K) < 1e-12
    assert metrics.nc3(torch.randn(K, 6, generator=gen, dtype=torch.float64), H, K) > 0.5
    # projector form: 1 when W reads only the span of the means, 0 when it reads only its complement.
    # Means whose span is the first K−1 axes: the simplex written in a basis of 1⊥.
    basis = torch.linalg.qr(torch.eye(K, dtype=torch.float64) - 1.0 / K)[0][:, : K - 1]  # K×(K−1), spans 1⊥
    means = torch.eye(6, K - 1, dtype=torch.float64) @ basis.T @ (torch.eye(K, dtype=torch.float64) - 1.0 / K)
    H = means.repeat_interleave(n, dim=1)
    P = torch.diag(torch.tensor([1.0] * (K - 1) + [0.0] * (7 - K), dtype=torch.float64))
    A = torch.randn(6, 6, generator=gen, dtype=torch.float64)
    assert metrics.nc3_projector(A @ P, H, K) == pytest.approx(1.0)
    assert metrics.nc3_projector(A @ (torch.eye(6, dtype=torch.float64) - P), H, K) < 1e-12


def test_rank_measures():
    sv = torch.tensor([1.0, 0.5, 5e-3, 5e-4, 0.0], dtype=torch.float64)
    assert metrics.numerical_rank(sv, 1e-2) == 2
    assert metrics.numerical_rank(sv, 1e-3) == 3
    assert metrics.stable_rank(torch.tensor([2.0, 1.0], dtype=torch.float64)) == pytest.approx(1.25)
    p = torch.tensor([2 / 3, 1 / 3])
    assert metrics.effective_rank(torch.tensor([2.0, 1.0], dtype=torch.float64)) == pytest.approx(
        math.exp(-float((p * p.log()).sum())))
    zero = metrics.rank_measures(torch.zeros(3, 4, dtype=torch.float64))
    assert zero["rank_1e-3"] == 0 and zero["effective_rank"] == 0 and zero["stable_rank"] == 0
    A = torch.diag(torch.tensor([3.0, 2.0, 1.0], dtype=torch.float64))
    assert metrics.rank_measures(A)["singular_values"] == pytest.approx([3.0, 2.0, 1.0])
