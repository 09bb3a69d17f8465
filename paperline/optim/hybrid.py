"""What the matrix optimizers here (SUMO, GaLore-AdamW, Muon) share.

They take parameter groups like any torch optimizer. A group is a *matrix group* by default: every
parameter in it must be a 2-D weight and gets the matrix method. A group with ``adamw=True`` gets
plain AdamW instead, computed by torch's own kernel (``torch.optim.adamw.adamw``; GaLore-AdamW
uses its official AdamW, ε before the bias correction) — the GaLore protocol trains embeddings,
norms, biases and the output head that way.

Optimizer-state sizes are counted from the state tensors themselves: every tensor of one or more
dimensions in ``optimizer.state[p]``. 0-d tensors (torch's step counters) and Python numbers are
bookkeeping and not counted, so the counts are exactly the spec's formulas (n·r + m·r for SUMO,
2n·r + m·r for GaLore-AdamW, m·n for Muon, 2·m·n for AdamW).
"""
from __future__ import annotations

from typing import Any, Iterable

import torch
from torch.optim.adamw import adamw as adamw_kernel


def check_positive(name: str, what: str, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{name}: {what} must be > 0, got {value!r}")


def check_unit_interval(name: str, what: str, value: float) -> None:
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name}: {what} must be in [0, 1), got {value!r}")


def check_matrix_groups(name: str, param_groups: list[dict[str, Any]], rank: str | None = None) -> None:
    """Every parameter of a matrix group is 2-D; with `rank` (the group key holding it),
    1 ≤ rank ≤ min(m, n) for each of them."""
    for g, group in enumerate(param_groups):
        check_positive(name, f"lr of parameter group {g}", group["lr"])
        if group.get("weight_decay", 0.0) < 0:
            raise ValueError(f"{name}: weight_decay of parameter group {g} must be ≥ 0, got {group['weight_decay']!r}")
        if group["adamw"]:
            continue
        for i, p in enumerate(group["params"]):
            if p.ndim != 2:
                raise ValueError(
                    f"{name}: parameter {i} of group {g} has shape {tuple(p.shape)}; a matrix group takes "
                    "2-D weights only (put embeddings, norms, biases and the head in a group with adamw=True)")
            if rank is not None:
                r = group[rank]
                if not 1 <= r <= min(p.shape):
                    raise ValueError(
                        f"{name}: rank {r} is not in [1, min(m, n) = {min(p.shape)}] for parameter {i} of "
                        f"group {g} with shape {tuple(p.shape)}")


def adamw_group_step(state: dict, group: dict[str, Any]) -> None:
    """One AdamW step on every parameter with a gradient in an ``adamw=True`` group (torch's kernel)."""
    params, grads, exp_avgs, exp_avg_sqs, steps = [], [], [], [], []
    for p in group["params"]:
        if p.grad is None:
            continue
        s = state[p]
        if not s:
            s["step"] = torch.tensor(0.0)
            s["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            s["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        params.append(p)
        grads.append(p.grad)
        exp_avgs.append(s["exp_avg"])
        exp_avg_sqs.append(s["exp_avg_sq"])
        steps.append(s["step"])
    if params:
        beta1, beta2 = group["betas"]
        adamw_kernel(params, grads, exp_avgs, exp_avg_sqs, [], steps, foreach=False, amsgrad=False,
                     beta1=beta1, beta2=beta2, lr=group["lr"], weight_decay=group["weight_decay"],
                     eps=group["eps"], maximize=False)


def state_numel(optimizer: torch.optim.Optimizer, params: Iterable[torch.Tensor] | None = None) -> int:
    """Optimizer-state floats of `params` (default: all), counted from the state tensors (see above)."""
    params = list(params) if params is not None else [p for g in optimizer.param_groups for p in g["params"]]
    return sum(v.numel() for p in params for v in optimizer.state.get(p, {}).values()
               if torch.is_tensor(v) and v.dim() > 0)


def state_bytes(optimizer: torch.optim.Optimizer, params: Iterable[torch.Tensor] | None = None) -> int:
    params = list(params) if params is not None else [p for g in optimizer.param_groups for p in g["params"]]
    return sum(v.numel() * v.element_size() for p in params for v in optimizer.state.get(p, {}).values()
               if torch.is_tensor(v) and v.dim() > 0)


def short_side_first(grad: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """(G as s×l with s = min(m, n), whether it was transposed): the projector always acts on the
    shorter side (spec pitfall: choose the subspace side by the shape)."""
    if grad.shape[0] > grad.shape[1]:
        return grad.T, True
    return grad, False
