"""STAR's policy regularisation for continuous actions: a conservative Q_ξ learned only on
in-buffer tuples, and the actor's KL term to its Boltzmann policy π̂(a|s) ∝ exp Q_ξ(s, a).

[I] The paper's operator T_β was not decoded (spec (b), (g)): we follow the spec's reconstruction,
T_β Q(s) = β log E_{a∼buffer}[exp(Q(s, a)/β)], fitted as in XQL by Gumbel regression of V_ξ,

    L_V = E_{(s,a)∼buffer}[exp((Q̄_ξ(s,a) − V_ξ(s))/β) − (Q̄_ξ(s,a) − V_ξ(s))/β − 1],

whose minimiser is exactly that log-mean-exp (β→∞: the in-sample mean; β→0: the in-sample max),
then Q_ξ(s, a) regressed onto r̂ + γ(1−d)·V_ξ(s′). Neither loss evaluates Q_ξ at an action that is
not in the buffer: `update` takes only buffer tuples, no policy.

The actor term, for a stochastic SAC actor: KL(π_φ ‖ π̂) = E_{a∼π}[log π − Q_ξ] + log Z(s), so the
actor loss gains η·E[log π(a|s) − Q_ξ(s, a)] (log Z dropped: it does not depend on φ)."""
from __future__ import annotations

import copy

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from paperline.rl.nets import mlp, no_weight_grads, soft_update

# XQL clips the Gumbel loss's exponent (its large-value instability); ours at 5, [I]
GUMBEL_CLIP = 5.0


def gumbel_loss(q: torch.Tensor, v: torch.Tensor, beta: float, clip: float = GUMBEL_CLIP) -> torch.Tensor:
    """E[exp(z) − z − 1], z = (q − v)/β (clipped above at `clip`): minimised over v at
    v = β log E[exp(q/β)] (when no z reaches the clip)."""
    z = ((q - v) / beta).clamp(max=clip)
    return (z.exp() - z - 1).mean()


def soft_in_sample_value(q: torch.Tensor, beta: float) -> torch.Tensor:
    """β log mean exp(q/β) over the last axis: the minimiser of `gumbel_loss`."""
    return beta * (torch.logsumexp(q / beta, -1) - np.log(q.shape[-1]))


class ConservativeQ(nn.Module):
    updates: torch.Tensor  # a buffer (register_buffer), typed for mypy

    def __init__(self, obs_dim: int, act_dim: int, hidden: int, layers: int, lr: float, beta: float, gamma: float,
                 tau: float, target_every: int, generator: torch.Generator | None = None):
        super().__init__()
        self.beta, self.gamma, self.tau, self.target_every = beta, gamma, tau, target_every
        self.q = mlp(obs_dim + act_dim, hidden, layers, 1, generator=generator)
        self.q_target = copy.deepcopy(self.q).requires_grad_(False)
        self.v = mlp(obs_dim, hidden, layers, 1, generator=generator)
        self.q_opt = torch.optim.Adam(self.q.parameters(), lr=lr, fused=True)
        self.v_opt = torch.optim.Adam(self.v.parameters(), lr=lr, fused=True)
        self.register_buffer("updates", torch.zeros((), dtype=torch.long))

    def q_xi(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        return self.q(torch.cat([obs, act], -1)).squeeze(-1)

    def value_loss(self, q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """V_ξ's loss against the target Q_ξ at buffer actions (offline IQL swaps in its expectile)."""
        return gumbel_loss(q, v, self.beta)

    @torch.no_grad()
    def advantage(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        """Q̄_ξ(s, a) − V_ξ(s) at buffer tuples: the offline variant's advantage-weighted extraction
        (π ∝ π_β·exp(β·A) leans toward π̂ ∝ exp Q_ξ only within the data's actions)."""
        return self.q_target(torch.cat([obs, act], -1)).squeeze(-1) - self.v(obs).squeeze(-1)

    def update(self, batch: dict[str, np.ndarray]) -> dict[str, float]:
        """One V_ξ (Gumbel regression) and one Q_ξ (TD onto V_ξ(s′)) step on buffer tuples only."""
        device = self.updates.device
        obs, act, rew, nxt, term = (torch.as_tensor(batch[k], device=device)
                                   for k in ("obs", "act", "reward", "next_obs", "terminated"))
        with torch.no_grad():
            q_in = self.q_target(torch.cat([obs, act], -1)).squeeze(-1)
        v_loss = self.value_loss(q_in, self.v(obs).squeeze(-1))
        self.v_opt.zero_grad()
        v_loss.backward()
        self.v_opt.step()
        with torch.no_grad():
            target = rew + self.gamma * (1 - term) * self.v(nxt).squeeze(-1)
        q_loss = F.mse_loss(self.q_xi(obs, act), target)
        self.q_opt.zero_grad()
        q_loss.backward()
        self.q_opt.step()
        self.updates += 1
        if int(self.updates) % self.target_every == 0:
            soft_update(self.q_target, self.q, self.tau)
        return {"v_xi_loss": v_loss.item(), "q_xi_loss": q_loss.item()}

    def actor_term(self, eta: float):
        """The actor's η·KL(π_φ ‖ π̂) term (log Z dropped), for `SAC.update(actor_extra=...)`."""
        def term(obs: torch.Tensor, action: torch.Tensor, log_prob: torch.Tensor) -> torch.Tensor:
            with no_weight_grads(self.q):  # it steers the actor only; Q_ξ learns in `update`
                return eta * (log_prob - self.q_xi(obs, action)).mean()
        return term
