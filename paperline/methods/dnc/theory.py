"""Closed-form side of the deep UFM under cross-entropy (Garrod & Keating, NeurIPS 2025).

All objectives use the UFM's normalisation: mean CE over the N = K·n samples plus (λ/2) times the
squared Frobenius norm of each of the L+1 factors (H1, W_1..W_L), with one common λ.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from scipy.optimize import minimize_scalar


def minimal_regularizer(singular_values: torch.Tensor, L: int, lam: float) -> torch.Tensor:
    """min over factorizations Z = W_L⋯W_1 H1 of (λ/2)(‖H1‖² + Σ‖W_l‖²): by AM-GM over the
    L+1 factors it is ((L+1)/2)·λ·Σσ_j^{2/(L+1)}, attained by the balanced factorization.
    [I, standard reduction with a common λ]"""
    return (L + 1) / 2 * lam * (singular_values ** (2 / (L + 1))).sum(-1)


def reduced_objective(Z: torch.Tensor, L: int, lam: float) -> torch.Tensor:
    """CE(Z) + minimal regulariser: the best UFM objective among factorizations of this Z.
    Singular values at round-off level (≤ max(K, N)·eps·σ_1, matrix_rank's cutoff) are dropped: σ^{2/(L+1)}
    has infinite slope at 0, so a 1e-16 would otherwise add ~1e-16^{2/(L+1)} per direction."""
    K, N = Z.shape
    labels = torch.arange(K, device=Z.device).repeat_interleave(N // K)
    ce = torch.nn.functional.cross_entropy(Z.T, labels)
    sv = torch.linalg.svdvals(Z)
    sv = sv[sv > sv[0] * max(K, N) * torch.finfo(Z.dtype).eps]
    return ce + minimal_regularizer(sv, L, lam)


def dnc_Z(K: int, n: int, c: float) -> torch.Tensor:
    """The DNC logits c·(I_K − 11ᵀ/K) ⊗ 1_nᵀ (class-major columns): K−1 singular values c√n."""
    simplex = torch.eye(K, dtype=torch.float64) - 1.0 / K
    return c * simplex.repeat_interleave(n, dim=1)


def cosine_Z(K: int, n: int, a: float) -> torch.Tensor:
    """The rank-2 cosine code Z_{c,c'} = a·cos(2π(c−c')/K), replicated n times: two singular values
    aK√n/2. [I, the spec's own low-rank competitor, not the paper's construction]"""
    idx = torch.arange(K, dtype=torch.float64)
    code = a * torch.cos(2 * math.pi * (idx[:, None] - idx[None, :]) / K)
    return code.repeat_interleave(n, dim=1)


def f_dnc(c: float, K: int, n: int, L: int, lam: float) -> float:
    """Reduced objective at dnc_Z(K, n, c)."""
    p = 2 / (L + 1)
    return math.log1p((K - 1) * math.exp(-c)) + (L + 1) * lam / 2 * (K - 1) * (c * math.sqrt(n)) ** p


def f_cos(a: float, K: int, n: int, L: int, lam: float) -> float:
    """Reduced objective at cosine_Z(K, n, a)."""
    p = 2 / (L + 1)
    shifted = a * (np.cos(2 * np.pi * np.arange(K) / K) - 1.0)  # logit minus the correct logit
    ce = float(np.log(np.exp(shifted).sum()))
    return ce + (L + 1) * lam / 2 * 2 * (a * K * math.sqrt(n) / 2) ** p


def _minimize_1d(f, upper: float) -> tuple[float, float]:
    """Global minimum of f on [0, upper]. For L ≥ 2 the penalty t^{2/(L+1)} is concave with infinite
    slope at 0, so f has a local minimum at t = 0 beside the interior one: scan a log-spaced grid
    (and t = 0), then refine the best grid cell with bounded Brent."""
    grid = np.concatenate([[0.0], np.geomspace(1e-6, upper, 4000)])
    values = np.array([f(t) for t in grid])
    i = int(values.argmin())
    if i == 0:
        return float(values[0]), 0.0
    lo, hi = grid[i - 1], grid[min(i + 1, len(grid) - 1)]
    res = minimize_scalar(f, bounds=(lo, hi), method="bounded", options={"xatol": 1e-12})
    if res.fun <= values[i]:
        return float(res.fun), float(res.x)
    return float(values[i]), float(grid[i])


def _upper_bound(K: int, n: int, L: int, lam: float, rank: int, scale: float) -> float:
    """Beyond this scale the penalty alone exceeds log K = f(0), so no minimiser lies past it."""
    if lam == 0:
        return 200.0  # no penalty: CE only decreases; any large scale is as good as the limit
    p = 2 / (L + 1)
    sigma = (math.log(K) / ((L + 1) * lam / 2 * rank)) ** (1 / p)
    return min(sigma / (scale * math.sqrt(n)), 1e6)


def f_dnc_min(K: int, n: int, L: int, lam: float) -> tuple[float, float]:
    """(f_DNC*, c*)."""
    return _minimize_1d(lambda c: f_dnc(c, K, n, L, lam), _upper_bound(K, n, L, lam, K - 1, 1.0))


def f_cos_min(K: int, n: int, L: int, lam: float) -> tuple[float, float]:
    """(f_cos*, a*)."""
    return _minimize_1d(lambda a: f_cos(a, K, n, L, lam), _upper_bound(K, n, L, lam, 2, K / 2))


def balanced_factorization(Z: torch.Tensor, L: int, width: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(H1, [W_1..W_L]) with W_L⋯W_1 H1 = Z and every factor carrying σ_j(Z)^{1/(L+1)}, adjacent
    factors aligned: the minimiser of the regulariser for this Z (needs width ≥ rank, taken as K).
    Hidden bases are the first coordinate axes of R^width."""
    K, N = Z.shape
    if width < K:
        raise ValueError(f"balanced_factorization: width {width} < K={K}")
    U, S, Vh = torch.linalg.svd(Z, full_matrices=False)  # U: K×K, Vh: K×N
    S = torch.where(S > S[0] * max(K, N) * torch.finfo(Z.dtype).eps, S, 0)  # round-off σ → 0: else
    root = torch.diag(S ** (1 / (L + 1)))  # (1e-16)^{1/(L+1)} would put a spurious direction in every factor
    embed = torch.eye(width, K, dtype=Z.dtype, device=Z.device)  # R^K → first K axes of R^width
    H1 = embed @ root @ Vh
    weights = [embed @ root @ embed.T for _ in range(L - 1)] + [U @ root @ embed.T]
    return H1, weights
