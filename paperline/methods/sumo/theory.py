"""Theory check (spec §e.1): Newton–Schulz error against the exact UVᵀ as the moment's condition
number κ grows. For each κ, r×n moments M = U·diag(σ)·Vᵀ with random orthonormal U, V and σ
log-spaced from 1 down to 1/κ; NS_k(M) (Muon's quintic, Frobenius-normalized input, fp32) and the
exact SVD orthogonalization are compared with the known UVᵀ:

    relative error = ‖O − UVᵀ‖_F / ‖UVᵀ‖_F   (‖UVᵀ‖_F = √r)

Expected: NS's error grows with κ (singular values below ~σ_max/a^k are not pushed to 1), the SVD
is exact to rounding at every κ."""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from paperline.methods.sumo.config import SumoConfig
from paperline.optim.muon import newton_schulz
from paperline.optim.sumo import orthogonalize_svd


def kappa_label(kappa: float) -> str:
    """1e+06 → "1e6": MLflow metric names take no "+"."""
    return f"{kappa:g}".replace("e+0", "e").replace("e+", "e")


def moment_with_condition_number(rank: int, cols: int, kappa: float, generator: torch.Generator):
    """(M, UVᵀ) with M r×n of condition number κ; built in float64, returned in float32."""
    U = torch.linalg.qr(torch.randn(rank, rank, generator=generator, dtype=torch.float64)).Q
    V = torch.linalg.qr(torch.randn(cols, rank, generator=generator, dtype=torch.float64)).Q
    sigma = torch.logspace(0, -math.log10(kappa), rank, dtype=torch.float64) if rank > 1 else torch.ones(1)
    M = (U * sigma) @ V.T
    return M.float(), (U @ V.T).float()


def relative_error(O: torch.Tensor, target: torch.Tensor) -> float:
    return float((O.double() - target.double()).norm() / target.double().norm())


def ns_error_vs_condition_number(cfg: SumoConfig) -> dict:
    """{"kappa": [...], "svd_error": {...}, "ns{k}_error": {...}, "ns{k}_min_singular_value": ...}:
    mean and max over cfg.theory_draws random moments per κ."""
    gen = torch.Generator().manual_seed(cfg.seed)
    rows: dict[str, Any] = {"kappa": list(cfg.condition_numbers), "rank": cfg.theory_rank, "cols": cfg.theory_cols,
            "svd_error_mean": [], "svd_error_max": []}
    for k in cfg.ns_steps:
        rows[f"ns{k}_error_mean"], rows[f"ns{k}_error_max"], rows[f"ns{k}_min_singular_value"] = [], [], []
    for kappa in cfg.condition_numbers:
        svd_errors: list[float] = []
        ns_errors: dict[int, list[float]] = {k: [] for k in cfg.ns_steps}
        ns_min_sv: dict[int, list[float]] = {k: [] for k in cfg.ns_steps}
        for _ in range(cfg.theory_draws):
            M, target = moment_with_condition_number(cfg.theory_rank, cfg.theory_cols, kappa, gen)
            svd_errors.append(relative_error(orthogonalize_svd(M), target))
            for k in cfg.ns_steps:
                O = newton_schulz(M, steps=k)
                ns_errors[k].append(relative_error(O, target))
                ns_min_sv[k].append(float(torch.linalg.svdvals(O.double()).min()))
        rows["svd_error_mean"].append(float(np.mean(svd_errors)))
        rows["svd_error_max"].append(float(np.max(svd_errors)))
        for k in cfg.ns_steps:
            rows[f"ns{k}_error_mean"].append(float(np.mean(ns_errors[k])))
            rows[f"ns{k}_error_max"].append(float(np.max(ns_errors[k])))
            rows[f"ns{k}_min_singular_value"].append(float(np.mean(ns_min_sv[k])))
    return rows
