"""GaLore-AdamW (Zhao et al., ICML 2024, Algorithm 2 and the official `galore_torch.AdamW`): every
T steps the projector P = top-r singular vectors of the gradient (exact SVD) on the shorter side;
Adam's two moments live in the projected r×l space and are *not* transported when P changes (as in
GaLore: the contrast SUMO draws); the normalized step is projected back and scaled by α.

State per m×n matrix (s = min(m, n), l = max(m, n)): exp_avg and exp_avg_sq (r×l each) and the
projector (s×r): 2·l·r + s·r floats — the spec's 2n·r + m·r for m ≤ n.
"""
from __future__ import annotations

import math

import torch

from paperline.optim.hybrid import (
    adamw_group_step,
    check_matrix_groups,
    check_positive,
    check_unit_interval,
    short_side_first,
)


class GaLoreAdamW(torch.optim.Optimizer):
    def __init__(self, params, lr: float = 1e-3, rank: int = 8, update_period: int = 200, alpha: float = 0.25,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0):
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
            if group["adamw"]:
                adamw_group_step(self.state, group)
                continue
            beta1, beta2 = group["betas"]
            r = group["rank"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                grad, transposed = short_side_first(p.grad.float())
                t = state.get("step", 0)
                if t % group["update_period"] == 0:
                    # exact SVD of the full gradient, as GaLore does; fp32 (spec pitfall); stored in
                    # the parameter's dtype, as galore_torch's projector does
                    U, _, _ = torch.linalg.svd(grad, full_matrices=False)
                    state["projector"] = U[:, :r].to(p.dtype)
                P = state["projector"].float()
                low = P.T @ grad  # r×l
                if "exp_avg" not in state:
                    state["exp_avg"] = torch.zeros_like(low, dtype=p.dtype)
                    state["exp_avg_sq"] = torch.zeros_like(low, dtype=p.dtype)
                t += 1
                state["step"] = t  # a Python int: bookkeeping, not state memory
                exp_avg = state["exp_avg"].float().lerp_(low, 1 - beta1)
                exp_avg_sq = state["exp_avg_sq"].float().mul_(beta2).addcmul_(low, low, value=1 - beta2)
                state["exp_avg"].copy_(exp_avg)
                state["exp_avg_sq"].copy_(exp_avg_sq)
                # bias correction as in galore_torch.AdamW (eps outside the corrected denominator)
                step_size = group["lr"] * math.sqrt(1 - beta2 ** t) / (1 - beta1 ** t)
                normalized = exp_avg / (exp_avg_sq.sqrt() + group["eps"])
                update = group["alpha"] * (P @ normalized)  # s×l back in the full space
                if transposed:
                    update = update.T
                p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(update.to(p.dtype), alpha=-step_size)
        return loss
