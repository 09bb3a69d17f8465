"""t-SignSGD, the ternary sign-SGD of LoTA-QAF (spec §b, repo `t_signSGD.py`): no learning rate;
each step moves an entry of a ternary tensor by one level against its gradient's sign, only where
|g| is above the step's quantile q_t of |g| over that tensor (and above τ), then clips to {−1, 0, 1}."""
from __future__ import annotations

import torch

TAU = 1e-9  # gradients at or below it never move an entry
PHASE_SPLIT = 0.8  # the share of steps in the first phase of the quantile schedule
Q_START, Q_MID, Q_END = 0.95, 0.999, 0.9999
SPIKE_NORM, SPIKE_QUANTILE = 10.0, 0.99995  # phase 2: skip outliers when the global grad-norm spikes


def quantile_at(step: int, total_steps: int) -> float:
    """q_t: linear 0.95 → 0.999 over the first 80% of the steps, then 0.999 → 0.9999."""
    split = PHASE_SPLIT * total_steps
    if step < split:
        return Q_START + (Q_MID - Q_START) * step / split
    return Q_MID + (Q_END - Q_MID) * (step - split) / max(total_steps - split, 1)


class TSignSGD(torch.optim.Optimizer):
    def __init__(self, params, total_steps: int):
        if total_steps < 1:
            raise ValueError(f"steps: t-SignSGD needs a step budget ≥ 1, got {total_steps}")
        super().__init__(params, {})
        self.total_steps = total_steps
        self.step_count = 0
        self.moved = 0  # entries changed at the last step (all tensors)

    @torch.no_grad()
    def step(self, closure=None):
        t = self.step_count
        q = quantile_at(t, self.total_steps)
        params = [p for group in self.param_groups for p in group["params"] if p.grad is not None]
        phase2 = t >= PHASE_SPLIT * self.total_steps
        spike = phase2 and torch.linalg.vector_norm(torch.stack(
            [torch.linalg.vector_norm(p.grad) for p in params])).item() > SPIKE_NORM if params else False
        moved = 0
        for p in params:
            g = p.grad
            a = g.abs().flatten().float()
            sigma = torch.quantile(a, q)
            move = (g.abs() > sigma) & (g.abs() > TAU)
            if spike:
                move &= g.abs() <= torch.quantile(a, SPIKE_QUANTILE)
            new = torch.round(torch.clamp(p - torch.sign(g) * move, -1, 1))
            moved += int((new != p).sum())
            p.copy_(new)
        self.step_count += 1
        self.moved = moved
