"""Neural-collapse and rank measures, exactly as the spec defines them.

Features are matrices H ∈ R^{d×N} whose columns are samples in class-major order (column c·n + i is
sample i of class c), so class means are a reshape. Everything expects float64.
"""
from __future__ import annotations

import math

import torch


def class_means(H: torch.Tensor, K: int) -> torch.Tensor:
    """M = [μ_c]_c ∈ R^{d×K}, uncentred."""
    d, N = H.shape
    return H.reshape(d, K, N // K).mean(-1)


def centred_means(H: torch.Tensor, K: int) -> torch.Tensor:
    """M̄ = [μ_c − μ_G]_c with μ_G the mean of the class means."""
    M = class_means(H, K)
    return M - M.mean(1, keepdim=True)


def within_between_cov(H: torch.Tensor, K: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Σ_W = (1/N)Σ(h−μ_c)(h−μ_c)ᵀ and Σ_B = (1/K)Σ(μ_c−μ_G)(μ_c−μ_G)ᵀ."""
    d, N = H.shape
    M = class_means(H, K)
    within = H - M.repeat_interleave(N // K, dim=1)
    Mbar = M - M.mean(1, keepdim=True)
    return within @ within.T / N, Mbar @ Mbar.T / K


def nc1(H: torch.Tensor, K: int) -> float:
    """(1/K)·tr(Σ_W Σ_B^†). Unstable when Σ_B is nearly rank-deficient (the low-rank optima): the
    pseudo-inverse keeps directions down to torch's default relative cutoff (~d·eps)."""
    sigma_w, sigma_b = within_between_cov(H, K)
    return float(torch.trace(sigma_w @ torch.linalg.pinv(sigma_b, hermitian=True)) / K)


def nc1_trace(H: torch.Tensor, K: int) -> float:
    """tr(Σ_W)/tr(Σ_B): the stable variant."""
    sigma_w, sigma_b = within_between_cov(H, K)
    return float(torch.trace(sigma_w) / torch.trace(sigma_b))


def simplex_etf_gram(K: int, dtype=torch.float64) -> torch.Tensor:
    """(I_K − 11ᵀ/K)/√(K−1): the unit-Frobenius Gram of a simplex ETF."""
    return (torch.eye(K, dtype=dtype) - 1.0 / K) / math.sqrt(K - 1)


def nc2_etf(H: torch.Tensor, K: int) -> float:
    """‖M̄ᵀM̄/‖M̄ᵀM̄‖_F − (I−11ᵀ/K)/√(K−1)‖_F (linear layers)."""
    Mbar = centred_means(H, K)
    G = Mbar.T @ Mbar
    return float(torch.linalg.norm(G / torch.linalg.norm(G) - simplex_etf_gram(K, H.dtype).to(H.device)))


def nc2_of(H: torch.Tensor, K: int) -> float:
    """‖MᵀM/‖MᵀM‖_F − I_K/√K‖_F with uncentred means (ReLU layers: orthogonal frame)."""
    M = class_means(H, K)
    G = M.T @ M
    eye = torch.eye(K, dtype=H.dtype, device=H.device) / math.sqrt(K)
    return float(torch.linalg.norm(G / torch.linalg.norm(G) - eye))


def nc3(W_last: torch.Tensor, H_last: torch.Tensor, K: int) -> float:
    """‖W_L/‖W_L‖_F − M̄ᵀ/‖M̄‖_F‖_F: classifier rows aligned with the centred means (last layer)."""
    Mbar_T = centred_means(H_last, K).T
    return float(torch.linalg.norm(W_last / torch.linalg.norm(W_last) - Mbar_T / torch.linalg.norm(Mbar_T)))


def nc3_projector(W: torch.Tensor, H: torch.Tensor, K: int) -> float:
    """‖W_l P_{M̄_l}‖_F/‖W_l‖_F for an intermediate layer, P the projector onto span(M̄_l) (1 when
    W_l only sees the class-mean directions). P = M̄ M̄^† with pinv's default cutoff."""
    Mbar = centred_means(H, K)
    P = Mbar @ torch.linalg.pinv(Mbar)
    return float(torch.linalg.norm(W @ P) / torch.linalg.norm(W))


def singular_values(A: torch.Tensor) -> torch.Tensor:
    return torch.linalg.svdvals(A)


def numerical_rank(sv: torch.Tensor, eps: float) -> int:
    """#{σ_j > ε·σ_1} (σ sorted descending)."""
    return int((sv > eps * sv[0]).sum()) if sv[0] > 0 else 0


def effective_rank(sv: torch.Tensor) -> float:
    """exp(−Σ p_j log p_j), p_j = σ_j/Σσ (0·log 0 = 0)."""
    if sv.sum() == 0:
        return 0.0
    p = sv / sv.sum()
    p = p[p > 0]
    return float(torch.exp(-(p * p.log()).sum()))


def stable_rank(sv: torch.Tensor) -> float:
    """‖A‖_F²/‖A‖_2² = Σσ_j²/σ_1²."""
    return float((sv ** 2).sum() / sv[0] ** 2) if sv[0] > 0 else 0.0


def rank_measures(A: torch.Tensor) -> dict:
    sv = singular_values(A)
    return {
        "singular_values": sv.tolist(),
        "rank_1e-2": numerical_rank(sv, 1e-2),
        "rank_1e-3": numerical_rank(sv, 1e-3),
        "effective_rank": effective_rank(sv),
        "stable_rank": stable_rank(sv),
    }
