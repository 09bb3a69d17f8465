"""NGN and NGN-M: SGD (with heavy-ball momentum for NGN-M) under the NGN step size.

NGN (Orvieto & Xiao 2024) writes a non-negative loss as f = (√f)² and takes a regularized
Gauss–Newton step on √f; the result is a scalar adaptive step

    γ_k = c / (1 + c‖g_k‖² / (2 f_k))      computed as   γ_k = 2c·f_k / (2f_k + c‖g_k‖²)

(the second form never divides by a tiny f_k). γ_k ≤ c, γ_k ≤ 2f_k/‖g_k‖² and γ_k → c as g → 0.
NGN-M (Islamov, Ajroldi, Orvieto, Lucchi; NeurIPS 2025, Alg. 1) puts the step size on the *fresh*
gradient before it enters the momentum:

    m_k = β·m_{k−1} + (1−β)·γ_k·g_k,    x_{k+1} = x_k − m_k       (m_{−1} = 0, i.e. x_{−1} = x_0)

which is x_{k+1} = x_k − (1−β)γ_k g_k + β(x_k − x_{k−1}). NGN is NGN-M with β = 0.

API (all NGN-type optimizers here): `loss = opt.step(closure)`. The closure clears the gradients,
computes the minibatch loss, calls backward() and returns that loss: the loss γ_k sees is then
the loss of the *same* minibatch as the gradient by construction. Under gradient accumulation
the closure returns the loss averaged exactly as the accumulated gradient is. The loss must be a
finite number ≥ 0 (a ValueError otherwise); ‖g‖ is the global norm over every parameter group.
After a step, `last_gamma` holds γ_k of each parameter group and `last_step_cap` 2f_k/‖g_k‖².
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable

import torch
from torch.optim import Optimizer

Closure = Callable[[], Any]


def ngn_step_size(c: float, loss: float, sq_grad_norm: float) -> float:
    """γ = c / (1 + c·‖g‖²/(2f)) in the overflow-safe form 2cf / (2f + c‖g‖²).

    f = 0 with g ≠ 0 gives γ = 0 (the Polyak cap 2f/‖g‖² is 0); f = 0 with g = 0 gives c, the
    limit g → 0 (the step multiplies a zero gradient then, so the value is a convention).
    """
    denominator = 2.0 * loss + c * sq_grad_norm
    if denominator == 0.0:
        return c
    return 2.0 * c * loss / denominator


def step_cap(loss: float, sq_grad_norm: float) -> float:
    """2f/‖g‖², the Polyak-type bound γ_k never exceeds (inf when g = 0)."""
    return 2.0 * loss / sq_grad_norm if sq_grad_norm > 0 else math.inf


def check_positive(name: str, value: float, optimizer: str) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{optimizer}: {name} must be a finite number > 0 (got {value!r})")


def check_unit_interval(name: str, value: float, optimizer: str) -> None:
    if not (isinstance(value, (int, float)) and 0.0 <= value < 1.0):
        raise ValueError(f"{optimizer}: {name} must lie in [0, 1) (got {value!r})")


def check_weight_decay(c: float, weight_decay: float, optimizer: str) -> None:
    if not (isinstance(weight_decay, (int, float)) and 0.0 <= weight_decay and c * weight_decay < 1.0):
        raise ValueError(f"{optimizer}: weight_decay must be ≥ 0 with c·weight_decay < 1, or the "
                         f"decay (1 − c·λ)x flips the sign of x (got c={c!r}, weight_decay={weight_decay!r})")


def closure_loss(closure: Closure | None, optimizer: str) -> tuple[Any, float]:
    """Run the closure with gradients on; return (what it returned, that loss as a float ≥ 0)."""
    if closure is None:
        raise TypeError(f"{optimizer}.step needs a closure that clears the gradients, computes the "
                        "minibatch loss, calls backward() and returns the loss: the step size "
                        "uses the loss of the same minibatch as the gradient")
    with torch.enable_grad():
        returned = closure()
    try:
        loss = float(returned.detach() if isinstance(returned, torch.Tensor) else returned)
    except (TypeError, ValueError, RuntimeError) as err:
        raise ValueError(f"{optimizer}: the closure must return the scalar minibatch loss "
                         f"(got {type(returned).__name__})") from err
    if not math.isfinite(loss) or loss < 0:
        raise ValueError(f"{optimizer}: the loss must be a finite number ≥ 0, as NGN writes "
                         f"f = (√f)² (got {loss!r}); shift a loss that can go negative by its lower bound")
    return returned, loss


def grads_of(groups: Iterable[dict]) -> list[tuple[dict, torch.Tensor, torch.Tensor]]:
    out = []
    for group in groups:
        for p in group["params"]:
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise RuntimeError("NGN-type optimizers do not support sparse gradients")
            out.append((group, p, p.grad))
    return out


def global_sq_norm(tensors: Iterable[torch.Tensor]) -> float:
    """Σ‖t‖² over all tensors, accumulated in float64 (float32 squares of large gradients overflow)."""
    norms = [torch.linalg.vector_norm(t, dtype=torch.float64) for t in tensors]
    if not norms:
        return 0.0
    return float(torch.stack([n.to(norms[0].device) for n in norms]).square().sum())


class NGNM(Optimizer):
    """NGN-M: heavy-ball momentum on the NGN step (paper Alg. 1; β = 0.9 is the paper's default).

    weight_decay λ is decoupled, x ← (1 − c·λ)x before the step, the form the third-party NGN-MD
    reference uses [2nd]; the spec gives none for NGN-M, so this is an [I] choice (default 0).
    """

    name = "NGN-M"

    def __init__(self, params, c: float = 1.0, momentum: float = 0.9, weight_decay: float = 0.0):
        super().__init__(params, dict(c=c, momentum=momentum, weight_decay=weight_decay))
        self.last_gamma: list[float] = []
        self.last_step_cap = math.nan

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        check_positive("c", group["c"], self.name)
        check_unit_interval("momentum", group["momentum"], self.name)
        check_weight_decay(group["c"], group["weight_decay"], self.name)

    @torch.no_grad()
    def step(self, closure: Closure | None = None):  # type: ignore[override]
        returned, loss = closure_loss(closure, self.name)
        entries = grads_of(self.param_groups)
        sq_norm = global_sq_norm(g for _, _, g in entries)  # one γ from the global norm
        gammas = {id(group): ngn_step_size(group["c"], loss, sq_norm) for group in self.param_groups}
        for group, p, grad in entries:
            gamma, beta = gammas[id(group)], group["momentum"]
            if group["weight_decay"]:
                p.mul_(1.0 - group["c"] * group["weight_decay"])
            if beta == 0.0:
                p.add_(grad, alpha=-gamma)
                continue
            state = self.state[p]
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = torch.zeros_like(p)
            buf = state["momentum_buffer"]
            buf.mul_(beta).add_(grad, alpha=(1.0 - beta) * gamma)  # γ on the fresh gradient
            p.sub_(buf)
        self.last_gamma = [gammas[id(group)] for group in self.param_groups]
        self.last_step_cap = step_cap(loss, sq_norm)
        return returned


class NGN(NGNM):
    """NGN (Orvieto & Xiao 2024): x_{k+1} = x_k − γ_k g_k, i.e. NGN-M with β = 0."""

    name = "NGN"

    def __init__(self, params, c: float = 1.0, weight_decay: float = 0.0):
        super().__init__(params, c=c, momentum=0.0, weight_decay=weight_decay)
