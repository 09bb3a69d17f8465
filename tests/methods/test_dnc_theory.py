import math

import pytest
import torch

from paperline.methods.dnc import theory


@pytest.mark.parametrize("K,L", [(4, 1), (10, 1), (4, 3), (10, 6)])
def test_f_dnc_and_f_cos_are_the_reduced_objective_of_their_Z(K, L):
    n, lam = 3, 5e-3
    for scale in (0.5, 2.0, 7.0):
        assert theory.f_dnc(scale, K, n, L, lam) == pytest.approx(
            float(theory.reduced_objective(theory.dnc_Z(K, n, scale), L, lam)), rel=1e-12)
        assert theory.f_cos(scale, K, n, L, lam) == pytest.approx(
            float(theory.reduced_objective(theory.cosine_Z(K, n, scale), L, lam)), rel=1e-12)


def test_explicit_Z_spectra():
    K, n, c, a = 10, 4, 3.0, 2.0
    sv = torch.linalg.svdvals(theory.dnc_Z(K, n, c))
    assert torch.allclose(sv[: K - 1], torch.full((K - 1,), c * math.sqrt(n), dtype=torch.float64))
    assert sv[K - 1] < 1e-12
    sv = torch.linalg.svdvals(theory.cosine_Z(K, n, a))
    assert torch.allclose(sv[:2], torch.full((2,), a * K * math.sqrt(n) / 2, dtype=torch.float64))
    assert sv[2] < 1e-12
    Z = theory.cosine_Z(K, n, a)  # diagonally superior: the correct class has the largest logit
    assert (Z.argmax(0) == torch.arange(K).repeat_interleave(n)).all()


def _regulariser(H1, weights, lam):
    return lam / 2 * (H1.pow(2).sum() + sum(W.pow(2).sum() for W in weights))


@pytest.mark.parametrize("L", [1, 2, 4])
def test_balanced_factorization_attains_the_minimal_regulariser(L):
    K, n, width, lam = 4, 3, 7, 1e-2
    gen = torch.Generator().manual_seed(0)
    Z = torch.randn(K, K * n, generator=gen, dtype=torch.float64)
    H1, weights = theory.balanced_factorization(Z, L, width)
    assert H1.shape == (width, K * n) and weights[-1].shape == (K, width)
    product = H1
    for W in weights:
        product = W @ product
    assert torch.allclose(product, Z, atol=1e-12)
    minimal = theory.minimal_regularizer(torch.linalg.svdvals(Z), L, lam)
    assert float(_regulariser(H1, weights, lam)) == pytest.approx(float(minimal), rel=1e-12)

    # the same product, unbalanced: more weight on H1 and less on W_L, or an invertible A between factors
    assert _regulariser(2 * H1, weights[:-1] + [weights[-1] / 2], lam) > minimal * (1 + 1e-3)
    A = torch.eye(width, dtype=torch.float64) + 0.3 * torch.randn(width, width, generator=gen, dtype=torch.float64)
    H1_mixed, WL_mixed = A @ H1, weights[-1] @ torch.linalg.inv(A)
    mixed_weights = weights[:-1] + [WL_mixed] if L == 1 else [weights[0] @ torch.linalg.inv(A)] + weights[1:]
    mixed_product = H1_mixed
    for W in mixed_weights:
        mixed_product = W @ mixed_product
    assert torch.allclose(mixed_product, Z, atol=1e-10)
    assert _regulariser(H1_mixed, mixed_weights, lam) > minimal * (1 + 1e-3)


def test_low_rank_bias_in_the_closed_forms():
    n, lam = 10, 5e-3
    for L in (4, 6, 8):
        assert theory.f_cos_min(10, n, L, lam)[0] < theory.f_dnc_min(10, n, L, lam)[0]
    for K in (4, 10):
        assert theory.f_dnc_min(K, n, 1, lam)[0] < theory.f_cos_min(K, n, 1, lam)[0]


def test_minima_match_values_computed_independently():
    # λ = 5e-3, K = 10, n = 10: numbers measured by the project lead with their own script
    for L, dnc, cos in [(1, 0.722, 1.355), (4, 0.387, 0.289), (6, 0.387, 0.209)]:
        assert theory.f_dnc_min(10, 10, L, 5e-3)[0] == pytest.approx(dnc, abs=1e-3)
        assert theory.f_cos_min(10, 10, L, 5e-3)[0] == pytest.approx(cos, abs=1e-3)


@pytest.mark.parametrize("K,L,lam", [(4, 1, 1e-3), (10, 4, 5e-3), (10, 8, 1e-2), (4, 6, 5e-4)])
def test_one_dimensional_minimisation_is_global_and_stationary(K, L, lam):
    n = 10
    for f, minimise in ((theory.f_dnc, theory.f_dnc_min), (theory.f_cos, theory.f_cos_min)):
        value, arg = minimise(K, n, L, lam)
        assert value == pytest.approx(f(arg, K, n, L, lam), rel=1e-12)
        grid = [0.05 * i for i in range(1, 2000)]
        assert value <= min(f(t, K, n, L, lam) for t in grid) + 1e-12
        h = 1e-5 * arg
        assert abs(f(arg + h, K, n, L, lam) - f(arg - h, K, n, L, lam)) / (2 * h) < 1e-5


def test_large_regularisation_makes_zero_the_minimiser():
    # for L ≥ 2 the penalty has infinite slope at 0; with a big λ the trivial Z = 0 (f = log K) wins
    value, arg = theory.f_dnc_min(10, 10, 4, 1.0)
    assert arg == 0.0 and value == pytest.approx(math.log(10))
