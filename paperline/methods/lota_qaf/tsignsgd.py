"""t-SignSGD, the ternary sign-SGD of LoTA-QAF (spec §b, the official `t_signSGD.py`): no learning
rate; each step moves an entry of a ternary tensor by one level against its gradient's sign, only
where |g| is above the step's quantile q_t of |g| over that tensor (and above τ), then clips to
{−1, 0, 1}. As the official: the step is counted from 1 (its `current_step += 1` comes before the
schedule), and in a phase-2 spike only gradients strictly below the cap move."""
from __future__ import annotations

import torch

TAU = 1e-9  # gradients at or below it never move an entry
PHASE_SPLIT = 0.8  # the share of steps in the first phase of the quantile schedule
Q_START, Q_MID, Q_END = 0.95, 0.999, 0.9999
SPIKE_NORM, SPIKE_QUANTILE = 10.0, 0.99995  # phase 2: skip outliers when the global grad-norm spikes


def in_phase2(step: int, total_steps: int) -> bool:
    """Step `step` (counted from 1) is past the first 0.8·T steps (phase 2 starts at ⌊0.8·T⌋ + 1)."""
    return step > PHASE_SPLIT * total_steps


def quantile_at(step: int, total_steps: int) -> float:
    """q_t at step `step`, counted from 1: 0.95 + 0.049·step/(0.8·T) up to 0.8·T (0.999 there), then
    0.999 → 0.9999 linearly, reached at T and held past it."""
    split = PHASE_SPLIT * total_steps
    if not in_phase2(step, total_steps):
        return Q_START + (Q_MID - Q_START) * step / split
    return Q_MID + (Q_END - Q_MID) * min((step - split) / (total_steps - split), 1.0)


class TSignSGD(torch.optim.Optimizer):
    def __init__(self, params, total_steps: int):
        if total_steps < 1:
            raise ValueError(f"steps: t-SignSGD needs a step budget ≥ 1, got {total_steps}")
        super().__init__(params, {})
        self.total_steps = total_steps
        self.step_count = 0  # steps taken
        self.moved = 0  # entries changed at the last step (all tensors)

    @torch.no_grad()
    def step(self, closure=None):
        self.step_count += 1  # before the schedule, as the official: step 1 already has q > 0.95
        t = self.step_count
        q = quantile_at(t, self.total_steps)
        params = [p for group in self.param_groups for p in group["params"] if p.grad is not None]
        spike = in_phase2(t, self.total_steps) and torch.linalg.vector_norm(torch.stack(
            [torch.linalg.vector_norm(p.grad) for p in params])).item() > SPIKE_NORM if params else False
        moved = 0
        for p in params:
            g = p.grad
            a = g.abs().flatten().float()
            sigma = torch.quantile(a, q)
            move = (g.abs() > sigma) & (g.abs() > TAU)
            if spike:  # strictly below the cap (the official's `<`): a gradient at the cap stays
                move &= g.abs() < torch.quantile(a, SPIKE_QUANTILE)
            new = torch.round(torch.clamp(p - torch.sign(g) * move, -1, 1))
            moved += int((new != p).sum())
            p.copy_(new)
        self.moved = moved
