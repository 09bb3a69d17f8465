"""MRN (Meta-Reward-Net, Liu et al., NeurIPS 2022), the baseline behind STAR's headline, as a variant
of the PEBBLE loop: after each reward update the reward model takes bi-level steps through the
critic's loss. The inner step is one SGD step of SAC's twin critic on its TD loss for a buffer
batch whose rewards are the reward model's (with their graph); the outer loss is the Bradley–Terry
loss of the labelled pairs with each segment's value the sum of the *updated* critic's
min(Q1, Q2) over its steps; its gradient reaches the reward model through the inner step. Only
the reward model moves: the critic keeps its weights (SAC trains it as before). We follow the
paper's idea (spec (h)), not its code: [I] the inner step's learning rate, the number of outer
steps a session and the critic (not the actor) as the inner learner are our choices."""
from __future__ import annotations

import numpy as np
import torch
from pydantic import Field
from torch.func import functional_call

from paperline.config import StrictModel
from paperline.rl.reward_model import RewardEnsemble, bradley_terry_loss
from paperline.rl.sac import SAC


class MRNSettings(StrictModel):
    inner_lr: float = Field(1e-3, ge=0)  # the critic's inner SGD step
    outer_updates: int = Field(10, ge=1)  # bi-level steps of the reward model after each reward update
    batch: int = Field(64, ge=1)  # buffer transitions of the inner step
    pairs: int = Field(32, ge=1)  # labelled pairs of the outer loss


def meta_reward_step(reward_model: RewardEnsemble, sac: SAC, features, batch: dict[str, np.ndarray],
                     seg0: tuple[np.ndarray, np.ndarray], seg1: tuple[np.ndarray, np.ndarray], y: np.ndarray,
                     inner_lr: float) -> float:
    """One bi-level step of the reward model. `features(obs, act)`: the reward model's input;
    `batch`: buffer transitions (obs, act, next_obs, terminated); `seg0`, `seg1`: (obs, act) of
    the labelled segments, [pairs, H, ·]; `y`: their labels. Returns the outer loss."""
    device = sac.device

    def tensor(x: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(x, dtype=torch.float32, device=device)

    obs, act, nxt, term = (tensor(batch[k]) for k in ("obs", "act", "next_obs", "terminated"))
    reward = reward_model(tensor(features(batch["obs"], batch["act"]))).mean(0)  # with its graph
    with torch.no_grad():
        a2, logp2 = sac.actor(nxt)
        q_next = torch.min(*sac.critic_target(nxt, a2)) - sac.alpha * logp2
    target = reward + sac.s.gamma * (1 - term) * q_next
    params: dict[str, torch.Tensor] = dict(sac.critic.named_parameters())
    q1, q2 = functional_call(sac.critic, params, (obs, act))
    inner = ((q1 - target) ** 2).mean() + ((q2 - target) ** 2).mean()
    grads = torch.autograd.grad(inner, list(params.values()), create_graph=True)
    updated = {k: p - inner_lr * g for (k, p), g in zip(params.items(), grads)}

    def value(seg: tuple[np.ndarray, np.ndarray]) -> torch.Tensor:
        return torch.min(*functional_call(sac.critic, updated, (tensor(seg[0]), tensor(seg[1])))).sum(-1)

    outer = bradley_terry_loss(value(seg0), value(seg1), tensor(y))
    weights = list(reward_model.parameters())
    for w, g in zip(weights, torch.autograd.grad(outer, weights, allow_unused=True)):
        w.grad = torch.zeros_like(w) if g is None else g
    reward_model.opt.step()
    reward_model.opt.zero_grad()
    return float(outer.detach())
