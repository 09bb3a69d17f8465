"""Muon (Jordan et al., 2024): momentum, then approximate orthogonalization of the momentum by a
5-step quintic Newton–Schulz iteration, for 2-D weights; AdamW for groups with ``adamw=True``.

torch ships `torch.optim.Muon` (2-D parameters only, Newton–Schulz in bfloat16); this copy keeps
the iteration in float32, so the theory experiment measures the iteration's own error rather than
bfloat16 rounding, and it takes AdamW groups like the other matrix optimizers here. A test checks
that its step agrees with `torch.optim.Muon` to bfloat16 precision.
"""
from __future__ import annotations

import math

import torch

from paperline.optim.hybrid import adamw_group_step, check_matrix_groups, check_positive, check_unit_interval

# Keller Jordan's coefficients (the spec's 3.4445, −4.7750, 2.0315): they maximize the slope at 0,
# so singular values end up in roughly [0.7, 1.2] rather than exactly at 1.
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


def newton_schulz(matrix: torch.Tensor, steps: int = 5, coefficients: tuple[float, float, float] = NS_COEFFICIENTS,
                  eps: float = 1e-7) -> torch.Tensor:
    """≈ UVᵀ of `matrix` = UΣVᵀ: Frobenius-normalize (so σ_max ≤ 1), then X ← aX + (bA + cA²)X with
    A = XXᵀ, on the shorter side. Singular values far below σ_max·(1/a)^steps stay below 1: that is
    the condition-number dependence SUMO's analysis bounds."""
    a, b, c = coefficients
    x = matrix.float()
    transposed = x.shape[0] > x.shape[1]
    if transposed:
        x = x.T
    x = x / x.norm().clamp(min=eps)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return (x.T if transposed else x).to(matrix.dtype)


class Muon(torch.optim.Optimizer):
    """W ← W − η·λ·W − η·√max(1, m/n)·NS5(G + μB) with B ← μB + G (Nesterov; as torch.optim.Muon and
    Keller Jordan's original). State per m×n matrix: the momentum buffer, m·n floats."""

    def __init__(self, params, lr: float = 0.02, momentum: float = 0.95, nesterov: bool = True,
                 ns_steps: int = 5, weight_decay: float = 0.0, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8):
        check_positive("Muon", "lr", lr)
        check_unit_interval("Muon", "momentum", momentum)
        if ns_steps < 1:
            raise ValueError(f"Muon: ns_steps must be ≥ 1, got {ns_steps!r}")
        defaults = dict(lr=lr, momentum=momentum, nesterov=nesterov, ns_steps=ns_steps,
                        weight_decay=weight_decay, betas=betas, eps=eps, adamw=False)
        super().__init__(params, defaults)
        check_matrix_groups("Muon", self.param_groups)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            if group["adamw"]:
                adamw_group_step(self.state, group)
                continue
            lr, mu = group["lr"], group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p)
                buf = state["momentum_buffer"]
                buf.mul_(mu).add_(p.grad)
                direction = p.grad + mu * buf if group["nesterov"] else buf
                update = newton_schulz(direction, steps=group["ns_steps"])
                p.mul_(1 - lr * group["weight_decay"])
                p.add_(update, alpha=-lr * math.sqrt(max(1.0, p.shape[0] / p.shape[1])))
        return loss
