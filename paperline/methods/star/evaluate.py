"""Evaluation with the true reward, and the value overestimation of a critic: Q(s_t, a_t) at the
states an evaluation episode visits minus the discounted Monte-Carlo return of the reward the
critic learns from (r̂ for the preference variants, the true reward for the oracle). The episode
runs on past its time limit until γ^k < mc_tail, so the return it measures is not truncated where
the critic's is not; only the first `episode_steps` states count, and only their true rewards make
the episode's return. (SAC's soft Q also counts future entropy bonuses: that bias is shared by every
SAC variant.)"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np


def mc_steps(gamma: float, tail: float) -> int:
    """Extra steps past the time limit so that γ^k < tail."""
    return math.ceil(math.log(tail) / math.log(gamma))


def rollout(env, policy: Callable[[np.ndarray], np.ndarray], seed: int, max_steps: int) -> dict[str, np.ndarray]:
    """One episode (or `max_steps` steps) of `policy`: observations, actions, true rewards, and
    whether it ended by termination."""
    obs, _ = env.reset(seed=seed)
    observations, actions, rewards = [], [], []
    terminated = False
    for _ in range(max_steps):
        action = policy(obs)
        nxt, reward, terminated, truncated, _ = env.step(action)
        observations.append(np.atleast_1d(obs))
        actions.append(np.atleast_1d(action))
        rewards.append(reward)
        obs = nxt
        if terminated or truncated:
            break
    return {"obs": np.asarray(observations, np.float32), "act": np.asarray(actions, np.float32),
            "reward": np.asarray(rewards, np.float64), "terminated": terminated}


def discounted_returns(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """G_t = Σ_k γ^k r_{t+k} to the end of the array."""
    out = np.zeros(len(rewards))
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = rewards[t] + gamma * running
        out[t] = running
    return out


def evaluate(env, policy, seeds: list[int], episode_steps: int, gamma: float, extra_steps: int = 0,
             q_fn: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
             reward_fn: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None) -> dict[str, float]:
    """Mean true return over episodes of `episode_steps` (one per seed); with `q_fn`, also the
    overestimation (mean of Q − G, and that over the mean |G|) under `reward_fn` (None: true reward)."""
    returns, gaps, scale = [], [], []
    for seed in seeds:
        ep = rollout(env, policy, seed, episode_steps + (extra_steps if q_fn else 0))
        returns.append(float(ep["reward"][:episode_steps].sum()))
        if q_fn is not None:
            r = ep["reward"] if reward_fn is None else reward_fn(ep["obs"], ep["act"])
            G = discounted_returns(np.asarray(r, np.float64), gamma)[:episode_steps]
            Q = q_fn(ep["obs"][:episode_steps], ep["act"][:episode_steps])
            gaps.append(Q - G)
            scale.append(np.abs(G))
    out = {"return": float(np.mean(returns)), "return_std": float(np.std(returns))}
    if q_fn is not None:
        gap, size = np.concatenate(gaps), np.concatenate(scale)
        out |= {"overestimation": float(gap.mean()), "overestimation_rel": float(gap.mean() / max(size.mean(), 1e-8))}
    return out
