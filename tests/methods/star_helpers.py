"""What STAR's exact tests share: minimising a loss over free tensors to the optimum they compare
with a closed form (the Bradley–Terry gap under PMR, the Gumbel regression's and the expectile's
minimisers)."""
from __future__ import annotations

from typing import Callable

import torch


def lbfgs_minimise(param: torch.Tensor, loss: Callable[[], torch.Tensor], max_iter: int = 200) -> torch.Tensor:
    """L-BFGS on `param` (requires_grad) to the tolerance an exact comparison needs; the result,
    detached. One `step` runs up to `max_iter` iterations."""
    opt = torch.optim.LBFGS([param], lr=1, max_iter=max_iter, tolerance_grad=1e-12, tolerance_change=1e-14)

    def closure():
        opt.zero_grad()
        value = loss()
        value.backward()
        return value

    opt.step(closure)
    return param.detach()
