"""Soft actor-critic (Haarnoja et al. 2018) with a tanh-Gaussian actor, twin critics, a learned
temperature and soft target updates every `target_every` steps. `update` takes an optional extra
actor term (STAR's policy regularisation adds η·KL to the Boltzmann policy of Q_ξ there)."""
from __future__ import annotations

import copy
import math
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from paperline.rl.nets import BackboneSettings, mlp, no_weight_grads, soft_update

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


class SACSettings(BackboneSettings):
    init_temperature: float = Field(0.1, gt=0)
    weight_decay: float = Field(0.0, ge=0)  # AdamW's (the paper's optimiser); 0 = Adam


class Actor(nn.Module):
    scale: torch.Tensor  # buffers (register_buffer), typed for mypy
    centre: torch.Tensor

    def __init__(self, obs_dim: int, act_dim: int, hidden: int, layers: int, low: np.ndarray, high: np.ndarray,
                 generator: torch.Generator | None = None):
        super().__init__()
        self.generator = generator  # the run's own stream (runs side by side in threads)
        self.net = mlp(obs_dim, hidden, layers, 2 * act_dim, generator=generator)
        self.register_buffer("scale", torch.as_tensor((high - low) / 2, dtype=torch.float32))
        self.register_buffer("centre", torch.as_tensor((high + low) / 2, dtype=torch.float32))

    def forward(self, obs: torch.Tensor, deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """(action in the env's bounds, log π(action|obs))."""
        mean, log_std = self.net(obs).chunk(2, -1)
        log_std = log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
        if deterministic:
            u = mean
        else:  # the run's generator lives on the CPU; its draws move to the networks' device
            u = mean + log_std.exp() * torch.randn(mean.shape, generator=self.generator).to(mean.device)
        a = torch.tanh(u)
        log_prob = (-0.5 * ((u - mean) / log_std.exp()) ** 2 - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        log_prob = log_prob - (2 * (math.log(2) - u - F.softplus(-2 * u))).sum(-1) - torch.log(self.scale).sum()
        return a * self.scale + self.centre, log_prob


class TwinQ(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int, hidden: int, layers: int, generator: torch.Generator | None = None):
        super().__init__()
        self.q1 = mlp(obs_dim + act_dim, hidden, layers, 1, generator=generator)
        self.q2 = mlp(obs_dim + act_dim, hidden, layers, 1, generator=generator)

    def forward(self, obs: torch.Tensor, act: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.cat([obs, act], -1)
        return self.q1(x).squeeze(-1), self.q2(x).squeeze(-1)


def _optimizer(params, s: SACSettings) -> torch.optim.Optimizer:
    # fused (here and in every optimiser of paperline.rl and STAR): one kernel per step, where foreach's dozen
    # ops dominate the small networks' updates on a CPU
    return torch.optim.AdamW(params, lr=s.lr, weight_decay=s.weight_decay, fused=True)


class SAC(nn.Module):
    updates: torch.Tensor  # a buffer (register_buffer), typed for mypy

    def __init__(self, obs_dim: int, act_dim: int, low: np.ndarray, high: np.ndarray, settings: SACSettings,
                 generator: torch.Generator | None = None):
        super().__init__()
        self.generator = generator
        self.s = settings
        self.obs_dim, self.act_dim = obs_dim, act_dim
        self.actor = Actor(obs_dim, act_dim, settings.hidden, settings.layers, low, high, generator)
        self.critic = TwinQ(obs_dim, act_dim, settings.hidden, settings.layers, generator)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(settings.init_temperature)))
        self.target_entropy = -float(act_dim)
        self.actor_opt = _optimizer(self.actor.parameters(), settings)
        self.critic_opt = _optimizer(self.critic.parameters(), settings)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=settings.lr, fused=True)
        self.register_buffer("updates", torch.zeros((), dtype=torch.long))  # saved with the weights

    @property
    def device(self) -> torch.device:
        return self.log_alpha.device

    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.exp()

    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        a, _ = self.actor(torch.as_tensor(obs, dtype=torch.float32, device=self.device).unsqueeze(0), deterministic)
        return a[0].cpu().numpy()

    @torch.no_grad()
    def q_value(self, obs: np.ndarray, act: np.ndarray) -> np.ndarray:
        """min(Q1, Q2): the value SAC bootstraps from."""
        q1, q2 = self.critic(torch.as_tensor(obs, dtype=torch.float32, device=self.device),
                             torch.as_tensor(act, dtype=torch.float32, device=self.device))
        return torch.min(q1, q2).cpu().numpy()

    def reset_critic(self) -> None:
        """PEBBLE's reset after the unsupervised phase: fresh critics (and their optimiser)."""
        fresh = TwinQ(self.obs_dim, self.act_dim, self.s.hidden, self.s.layers, self.generator)
        self.critic.load_state_dict(fresh.state_dict())
        self.critic_target.load_state_dict(fresh.state_dict())
        self.critic_opt.state.clear()  # the same optimiser object (a checkpoint holds it), fresh moments

    def update(self, batch: dict[str, np.ndarray],
               actor_extra: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor] | None = None
               ) -> dict[str, float]:
        """One critic, actor and temperature step. `actor_extra(obs, action, log_prob)` -> a scalar
        added to the actor loss."""
        obs, act, rew, nxt, term = (torch.as_tensor(batch[k], device=self.device)
                                   for k in ("obs", "act", "reward", "next_obs", "terminated"))
        with torch.no_grad():
            a2, logp2 = self.actor(nxt)
            q_next = torch.min(*self.critic_target(nxt, a2)) - self.alpha * logp2
            target = rew + self.s.gamma * (1 - term) * q_next
        q1, q2 = self.critic(obs, act)
        critic_loss = F.mse_loss(q1, target) + F.mse_loss(q2, target)
        self.critic_opt.zero_grad()
        critic_loss.backward()
        self.critic_opt.step()

        a, logp = self.actor(obs)
        with no_weight_grads(self.critic):  # the critic's gradients would be cleared before its next step
            q_pi = torch.min(*self.critic(obs, a))
        actor_loss = (self.alpha.detach() * logp - q_pi).mean()
        if actor_extra is not None:
            actor_loss = actor_loss + actor_extra(obs, a, logp)
        self.actor_opt.zero_grad()
        actor_loss.backward()
        self.actor_opt.step()

        alpha_loss = (self.alpha * (-logp.detach() - self.target_entropy)).mean()
        self.alpha_opt.zero_grad()
        alpha_loss.backward()
        self.alpha_opt.step()

        self.updates += 1
        if int(self.updates) % self.s.target_every == 0:
            soft_update(self.critic_target, self.critic, self.s.tau)
        return {"critic_loss": critic_loss.item(), "actor_loss": actor_loss.item(), "alpha": self.alpha.item()}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"actor_opt": self.actor_opt, "critic_opt": self.critic_opt, "alpha_opt": self.alpha_opt}
