"""DQN for discrete observations and actions (one-hot inputs): ε-greedy exploration, TD target
with the max over all actions, soft target updates every `target_every` steps. `update` takes an
optional extra loss term on the online Q network (STAR's graph-Q̂ KL in the discrete variant)."""
from __future__ import annotations

import copy
from typing import Annotated, Callable

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from paperline.rl.nets import BackboneSettings, mlp, soft_update

Unit = Annotated[float, Field(ge=0, le=1)]


class DQNSettings(BackboneSettings):
    """ε-greedy exploration decays linearly from eps_start to eps_end over eps_decay_steps."""

    hidden: int = Field(64, ge=1)
    lr: float = Field(1e-3, gt=0)
    batch: int = Field(64, ge=1)
    gamma: float = Field(0.95, gt=0, lt=1)
    tau: float = Field(0.05, gt=0, le=1)
    eps_start: Unit = 1.0
    eps_end: Unit = 0.05
    eps_decay_steps: int = Field(2000, ge=1)


def one_hot(index: np.ndarray | torch.Tensor, n: int) -> torch.Tensor:
    return F.one_hot(torch.as_tensor(index).long().reshape(-1), n).float()


class DQN(nn.Module):
    updates: torch.Tensor  # a buffer (register_buffer), typed for mypy

    def __init__(self, n_states: int, n_actions: int, settings: DQNSettings, generator: torch.Generator | None = None):
        super().__init__()
        self.s, self.n_states, self.n_actions, self.generator = settings, n_states, n_actions, generator
        self.q = mlp(n_states, settings.hidden, settings.layers, n_actions, generator=generator)
        self.q_target = copy.deepcopy(self.q).requires_grad_(False)
        self.opt = torch.optim.Adam(self.q.parameters(), lr=settings.lr, fused=True)
        self.register_buffer("updates", torch.zeros((), dtype=torch.long))

    def epsilon(self, step: int) -> float:
        frac = min(1.0, step / max(1, self.s.eps_decay_steps))
        return self.s.eps_start + frac * (self.s.eps_end - self.s.eps_start)

    @property
    def device(self) -> torch.device:
        return self.updates.device

    def q_values(self, states: np.ndarray | torch.Tensor) -> torch.Tensor:
        return self.q(one_hot(states, self.n_states).to(self.device))

    def act(self, state: int, rng: np.random.Generator, epsilon: float = 0.0) -> int:
        if rng.random() < epsilon:
            return int(rng.integers(self.n_actions))
        with torch.no_grad():
            return int(self.q_values(np.array([state])).argmax(-1).item())

    @torch.no_grad()
    def q_value(self, states: np.ndarray, actions: np.ndarray) -> np.ndarray:
        q = self.q_values(states)
        return q.gather(1, torch.as_tensor(actions, device=self.device).long().reshape(-1, 1)).squeeze(1).cpu().numpy()

    def reset(self) -> None:
        """Fresh Q networks (the same optimiser object, fresh moments)."""
        fresh = mlp(self.n_states, self.s.hidden, self.s.layers, self.n_actions, generator=self.generator)
        self.q.load_state_dict(fresh.state_dict())
        self.q_target.load_state_dict(fresh.state_dict())
        self.opt.state.clear()

    def update(self, batch: dict[str, np.ndarray], extra: Callable[[], torch.Tensor] | None = None) -> dict[str, float]:
        """One TD step: y = r + γ(1−d)·max_a′ Q̄(s′, a′) over all actions (spec (g), App. A.2)."""
        d = self.device
        obs = one_hot(batch["obs"][:, 0], self.n_states).to(d)
        nxt = one_hot(batch["next_obs"][:, 0], self.n_states).to(d)
        act = torch.as_tensor(batch["act"][:, 0], device=d).long()
        rew, term = torch.as_tensor(batch["reward"], device=d), torch.as_tensor(batch["terminated"], device=d)
        with torch.no_grad():
            target = rew + self.s.gamma * (1 - term) * self.q_target(nxt).max(-1).values
        q = self.q(obs).gather(1, act.reshape(-1, 1)).squeeze(1)
        loss = F.mse_loss(q, target)
        extra_loss = extra() if extra is not None else None
        total = loss if extra_loss is None else loss + extra_loss
        self.opt.zero_grad()
        total.backward()
        self.opt.step()
        self.updates += 1
        if int(self.updates) % self.s.target_every == 0:
            soft_update(self.q_target, self.q, self.s.tau)
        return {"td_loss": loss.item()} | ({"kl_loss": extra_loss.item()} if extra_loss is not None else {})
