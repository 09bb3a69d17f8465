"""Evaluation with the true reward (greedy policy), and the value overestimation of a critic:
Q(s_t, a_t) at the states an episode of the policy the critic evaluates visits, minus the
discounted Monte-Carlo return of the reward the critic learns from (r̂ for the preference
variants, the true reward for the oracle). The episode runs on past its time limit until
γ^k < mc_tail, so the return it measures is not truncated where the critic's is not; only the first
`episode_steps` states count. SAC's critic is a soft Q of its stochastic policy: the episode samples
that policy and the return adds the entropy bonuses −α log π(a_{t+k}|s_{t+k}) of the steps k ≥ 1 it
bootstraps through; DQN's is the greedy policy's Q."""
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


def evaluate(env, policy, seeds: list[int], episode_steps: int) -> dict[str, float]:
    """Mean (and std) true return over episodes of `episode_steps`, one per seed."""
    returns = [float(rollout(env, policy, seed, episode_steps)["reward"].sum()) for seed in seeds]
    return {"return": float(np.mean(returns)), "return_std": float(np.std(returns))}


def soft_returns(rewards: np.ndarray, bonus: np.ndarray | None, gamma: float) -> np.ndarray:
    """G_t = r_t + Σ_{k≥1} γ^k (r_{t+k} + bonus_{t+k}): what a soft Q(s_t, a_t) estimates."""
    if bonus is None:
        return discounted_returns(rewards, gamma)
    return discounted_returns(rewards + bonus, gamma) - bonus


def overestimation(env, policy_factory: Callable[[], tuple[Callable, list]], seeds: list[int], episode_steps: int,
                   extra_steps: int, gamma: float, q_fn: Callable[[np.ndarray, np.ndarray], np.ndarray],
                   reward_fn: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None) -> dict[str, float]:
    """Mean of Q − G over the first `episode_steps` states of one episode per seed, and that over the
    mean |G|. `policy_factory()` -> (policy, bonuses): the policy appends each step's entropy bonus
    to the list (SAC), or leaves it empty (no bonus). `reward_fn` None: the true reward."""
    gaps, scale = [], []
    for seed in seeds:
        policy, bonuses = policy_factory()
        ep = rollout(env, policy, seed, episode_steps + extra_steps)
        r = np.asarray(ep["reward"] if reward_fn is None else reward_fn(ep["obs"], ep["act"]), np.float64)
        G = soft_returns(r, np.asarray(bonuses, np.float64) if bonuses else None, gamma)[:episode_steps]
        gaps.append(q_fn(ep["obs"][:episode_steps], ep["act"][:episode_steps]) - G)
        scale.append(np.abs(G))
    gap, size = np.concatenate(gaps), np.concatenate(scale)
    return {"overestimation": float(gap.mean()), "overestimation_rel": float(gap.mean() / max(size.mean(), 1e-8))}
