"""GaLore-AdamW (Zhao et al., ICML 2024, Algorithm 2), as the official `galore_torch.AdamW` and
`GaLoreProjector` (proj_type "std") compute it: every T steps the projector P = top-r singular
vectors of the gradient (exact SVD), the right ones when rows ≥ columns (a square weight too), the
left ones otherwise; Adam's two moments live in the projected r×l space and are *not* transported
when P changes (as in GaLore: the contrast SUMO draws); the normalized step is projected back and
scaled by α. As the official code: the denominator is √v + ε before the bias correction, which goes
into the step size lr·√(1−β₂ᵗ)/(1−β₁ᵗ); ε defaults to 1e-6; the decoupled weight decay comes after
the step (p ← p − lr·wd·p on the stepped weight). Groups with ``adamw=True`` get the same AdamW
without the projection (the official optimizer's groups without a rank), not torch's kernel.

State per m×n matrix (s = min(m, n), l = max(m, n)): exp_avg and exp_avg_sq (r×l each) and the
projector (s×r): 2·l·r + s·r floats — the spec's 2n·r + m·r for m ≤ n.
"""
from __future__ import annotations

import math

import torch

from paperline.optim.hybrid import check_matrix_groups, check_positive, check_unit_interval


def projected_side_first(grad: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """(G or Gᵀ so that the projector acts on the rows, whether it was transposed). GaLore's "std"
    projector takes the right singular vectors when rows ≥ columns: Gᵀ's left ones."""
    if grad.shape[0] >= grad.shape[1]:
        return grad.T, True
    return grad, False


def galore_projector(grad: torch.Tensor, rank: int) -> torch.Tensor:
    """The s×r projector from the exact SVD of G itself, as GaLoreProjector takes
    it: Vh[:r]ᵀ when rows ≥ columns, else U[:, :r]. SVD-ing G, not Gᵀ, keeps the official signs: the
    moments are not transported across a projector change, so a flipped vector would flip their sign."""
    U, _, Vh = torch.linalg.svd(grad, full_matrices=False)
    return Vh[:rank].T if grad.shape[0] >= grad.shape[1] else U[:, :rank]


def adam_direction(state: dict, grad: torch.Tensor, group: dict, dtype: torch.dtype) -> tuple[torch.Tensor, float]:
    """galore_torch.AdamW's moments on `grad` (arithmetic in grad's dtype, state stored in `dtype`):
    the normalized direction m / (√v + ε) and its step size lr·√(1−β₂ᵗ)/(1−β₁ᵗ)."""
    beta1, beta2 = group["betas"]
    if "exp_avg" not in state:
        state["exp_avg"] = torch.zeros_like(grad, dtype=dtype)
        state["exp_avg_sq"] = torch.zeros_like(grad, dtype=dtype)
    t = state["step"]
    exp_avg = state["exp_avg"].to(grad.dtype).mul_(beta1).add_(grad, alpha=1 - beta1)
    exp_avg_sq = state["exp_avg_sq"].to(grad.dtype).mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    state["exp_avg"].copy_(exp_avg)
    state["exp_avg_sq"].copy_(exp_avg_sq)
    step_size = group["lr"] * math.sqrt(1 - beta2 ** t) / (1 - beta1 ** t)
    return exp_avg / (exp_avg_sq.sqrt() + group["eps"]), step_size


class GaLoreAdamW(torch.optim.Optimizer):
    def __init__(self, params, lr: float = 1e-3, rank: int = 8, update_period: int = 200, alpha: float = 0.25,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6, weight_decay: float = 0.0):
        check_positive("GaLoreAdamW", "lr", lr)
        check_positive("GaLoreAdamW", "alpha", alpha)
        for i, beta in enumerate(betas):
            check_unit_interval("GaLoreAdamW", f"betas[{i}]", beta)
        if update_period < 1:
            raise ValueError(f"GaLoreAdamW: update_period must be ≥ 1, got {update_period!r}")
        defaults = dict(lr=lr, rank=rank, update_period=update_period, alpha=alpha, betas=betas, eps=eps,
                        weight_decay=weight_decay, adamw=False)
        super().__init__(params, defaults)
        check_matrix_groups("GaLoreAdamW", self.param_groups, rank="rank")

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                t = state.get("step", 0)
                # fp32 arithmetic (spec pitfall) under bf16 weights; float64 weights stay float64
                grad, transposed = p.grad.to(torch.promote_types(p.dtype, torch.float32)), False
                if not group["adamw"]:
                    if t % group["update_period"] == 0:
                        state["projector"] = galore_projector(grad, group["rank"]).to(p.dtype)
                    grad, transposed = projected_side_first(grad)
                    P = state["projector"].to(grad.dtype)
                    grad = P.T @ grad  # r×l
                state["step"] = t + 1  # a Python int: bookkeeping, not state memory
                update, step_size = adam_direction(state, grad, group, p.dtype)
                if not group["adamw"]:
                    update = group["alpha"] * (P @ update)  # s×l back in the full space
                if transposed:
                    update = update.T
                p.add_(update.to(p.dtype), alpha=-step_size)
                if group["weight_decay"] > 0:  # after the step, on the stepped weight (galore_torch)
                    p.add_(p, alpha=-group["lr"] * group["weight_decay"])
        return loss
