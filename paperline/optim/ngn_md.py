"""NGN-MD (v1): NGN-M with an RMSprop diagonal preconditioner (Islamov et al., NeurIPS 2025).

[2nd] The paper's PDF was not available: these rules follow a third-party reference
implementation, as the spec records them (paperline's ../shared/methods/ngn_m.md, part b):

    v_k = β₂·v_{k−1} + (1−β₂)·g_k²,          D_k = √(v_k / (1−β₂^k)) + ε
    γ_k = c / (1 + c·Σ_j g_{k,j}²/D_{k,j} / (2f_k))   (computed as 2cf/(2f + c·Σ g²/D))
    m_k = β₁·m_{k−1} + (1−β₁)·γ_k·D_k⁻¹g_k,  x ← x − m_k
    decoupled weight decay x ← (1 − c·λ)·x   (applied before the step, as AdamW does)

The preconditioned squared norm Σ g²/D is global over every parameter group, so there is one
scalar γ_k per group. Same API as NGN-M: `loss = opt.step(closure)` (see paperline.optim.ngn).
"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch.optim import Optimizer

from paperline.optim.ngn import (
    Closure,
    check_positive,
    check_unit_interval,
    check_weight_decay,
    closure_loss,
    grads_of,
    ngn_step_size,
    step_cap,
)


class NGNMD(Optimizer):
    name = "NGN-MD"

    def __init__(self, params, c: float = 1.0, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0):
        super().__init__(params, dict(c=c, betas=tuple(betas), eps=eps, weight_decay=weight_decay))
        self.last_gamma: list[float] = []
        self.last_step_cap = math.nan

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        check_positive("c", group["c"], self.name)
        if len(group["betas"]) != 2:
            raise ValueError(f"{self.name}: betas must be two numbers (got {group['betas']!r})")
        check_unit_interval("betas[0]", group["betas"][0], self.name)
        check_unit_interval("betas[1]", group["betas"][1], self.name)
        check_positive("eps", group["eps"], self.name)
        check_weight_decay(group["c"], group["weight_decay"], self.name)

    @torch.no_grad()
    def step(self, closure: Closure | None = None):  # type: ignore[override]
        returned, loss = closure_loss(closure, self.name)
        entries = grads_of(self.param_groups)
        # the preconditioner first: D_k enters γ_k through Σ g²/D
        directions, terms = [], []  # D⁻¹g per parameter, Σ g²/D per parameter
        for group, p, grad in entries:
            state = self.state[p]
            if not state:
                state["step"] = 0
                state["exp_avg_sq"] = torch.zeros_like(p)
                state["exp_avg"] = torch.zeros_like(p)
            state["step"] += 1
            beta2 = group["betas"][1]
            v = state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
            D = (v / (1.0 - beta2 ** state["step"])).sqrt_().add_(group["eps"])
            direction = grad / D
            directions.append(direction)
            # g·(g/D) ≈ |g| elementwise: no float32 overflow; the sum accumulates in float64
            terms.append(torch.sum(grad * direction, dtype=torch.float64))
        sq_norm = float(torch.stack(terms).sum()) if terms else 0.0  # one host sync per step
        gammas = {id(group): ngn_step_size(group["c"], loss, sq_norm) for group in self.param_groups}
        for (group, p, _), direction in zip(entries, directions):
            gamma, beta1 = gammas[id(group)], group["betas"][0]
            if group["weight_decay"]:
                p.mul_(1.0 - group["c"] * group["weight_decay"])
            m = self.state[p]["exp_avg"]
            m.mul_(beta1).add_(direction, alpha=(1.0 - beta1) * gamma)
            p.sub_(m)
        self.last_gamma = [gammas[id(group)] for group in self.param_groups]
        self.last_step_cap = step_cap(loss, sq_norm)  # 2f / Σ g²/D: the cap in the D-norm
        return returned
