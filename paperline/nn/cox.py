"""Cox proportional-hazards partial likelihood, the survival loss of deep survival models.

    loss = -(1 / #events) * sum_{i: event_i} [ h_i - log sum_{j: t_j >= t_i} exp(h_j) ]

with Breslow's handling of ties: every subject whose time equals t_i is in the risk set of i,
and tied events each contribute their own term. Computed in O(n log n): sort by time
descending, log-cumsum-exp, and give each tie group the value at its last member.
"""
from __future__ import annotations

import torch


def cox_partial_likelihood_loss(risk: torch.Tensor, time: torch.Tensor, event: torch.Tensor) -> torch.Tensor:
    """Mean negative Cox partial log-likelihood (Breslow ties) of log-hazards `risk` (n,)."""
    risk, time = risk.reshape(-1), time.reshape(-1).to(risk.dtype)
    event = event.reshape(-1).to(torch.bool)
    if risk.numel() != time.numel() or risk.numel() != event.numel():
        raise ValueError(f"risk, time and event must have one value per subject; got "
                         f"{risk.numel()}, {time.numel()} and {event.numel()}")
    if not bool(event.any()):
        return risk.sum() * 0.0  # no event: the likelihood is constant; keep the graph
    order = torch.argsort(time, descending=True, stable=True)
    r, t, e = risk[order], time[order], event[order]
    log_cum = torch.logcumsumexp(r, dim=0)  # log sum over subjects sorted before (longer times) and self
    # ties: the risk set of a tied subject includes all the tie group -> the group's last position
    _, inverse, counts = torch.unique_consecutive(t, return_inverse=True, return_counts=True)
    last = torch.cumsum(counts, dim=0) - 1
    log_risk_set = log_cum[last[inverse]]
    return -(r - log_risk_set)[e].sum() / e.sum()
