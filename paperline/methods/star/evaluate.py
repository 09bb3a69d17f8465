"""Evaluation with the true reward (greedy policy), and the critic's value overestimation the
paper's way, over training (`evaluate_with_overestimation`, at every evaluation point): the
critic's mean Q(s_t, a_t) over the states of the current greedy policy's first evaluation episode
against the mean discounted *true* return G_t from those states, (Q̄ − Ḡ)/|Ḡ| (the paper's
Q̄/Ḡ − 1 where returns are positive). That episode runs on past its time limit until γ^k < mc_tail,
so G_t is not truncated where the critic's Q is not; only its first `episode_steps` states count,
and only they count towards the score (so the evaluation's return is the same as without it).
Until issue 40 the measure was ours, once at the end: Q minus the discounted return of the reward
the critic learns from (r̂), along an episode of SAC's stochastic policy with its entropy bonuses."""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

MIN_TRUE_VALUE = 1e-6  # below this |true return| the relative overestimation is undefined


def mc_steps(gamma: float, tail: float) -> int:
    """Extra steps past the time limit so that γ^k < tail."""
    return math.ceil(math.log(tail) / math.log(gamma))


def rollout(env, policy: Callable[[np.ndarray], np.ndarray], seed: int, max_steps: int) -> dict:
    """One episode (or `max_steps` steps) of `policy`: observations, actions, true rewards, whether
    it ended by termination, and each step's `success` flag where the environment reports one
    (Meta-World's `info["success"]`; else None)."""
    obs, _ = env.reset(seed=seed)
    observations, actions, rewards = [], [], []
    terminated = False
    success: list[float] = []
    for _ in range(max_steps):
        action = policy(obs)
        nxt, reward, terminated, truncated, info = env.step(action)
        observations.append(np.atleast_1d(obs))
        actions.append(np.atleast_1d(action))
        rewards.append(reward)
        if "success" in info:
            success.append(float(info["success"]))
        obs = nxt
        if terminated or truncated:
            break
    return {"obs": np.asarray(observations, np.float32), "act": np.asarray(actions, np.float32),
            "reward": np.asarray(rewards, np.float64), "terminated": terminated,
            "success": np.asarray(success) if success else None}


def discounted_returns(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """G_t = Σ_k γ^k r_{t+k} to the end of the array."""
    out = np.zeros(len(rewards))
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = rewards[t] + gamma * running
        out[t] = running
    return out


def _score(episodes: list[dict], episode_steps: int) -> dict[str, Any]:
    """Mean (and std) true return of the episodes' first `episode_steps` steps, and the success rate
    where every episode reports success (an episode succeeds if any of those steps does, as
    PEBBLE's evaluation counts it), else None."""
    returns = [float(ep["reward"][:episode_steps].sum()) for ep in episodes]
    flags = [None if ep["success"] is None else float(ep["success"][:episode_steps].max()) for ep in episodes]
    known = [f for f in flags if f is not None]
    success = float(np.mean(known)) if flags and len(known) == len(flags) else None
    return {"return": float(np.mean(returns)), "return_std": float(np.std(returns)), "success": success}


def evaluate(env, policy, seeds: list[int], episode_steps: int) -> dict[str, Any]:
    """Mean (and std) true return over episodes of `episode_steps`, one per seed, and the success
    rate where the environment reports success (else None)."""
    return _score([rollout(env, policy, seed, episode_steps) for seed in seeds], episode_steps)


def evaluate_with_overestimation(env, policy, seeds: list[int], episode_steps: int, extra_steps: int, gamma: float,
                                 q_fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> dict[str, Any]:
    """`evaluate`, the first episode run `extra_steps` on past the time limit, and the paper's
    overestimation on it: `q_mean` (the critic's mean Q over its first `episode_steps` states and
    actions), `true_value` (the mean discounted true return from them), `overestimation_true`
    (their difference) and `overestimation_true_rel` (that over |true_value|; None where that is ~0)."""
    first = rollout(env, policy, seeds[0], episode_steps + extra_steps)
    episodes = [first] + [rollout(env, policy, seed, episode_steps) for seed in seeds[1:]]
    n = min(episode_steps, len(first["reward"]))
    q_mean = float(np.mean(q_fn(first["obs"][:n], first["act"][:n])))
    true_value = float(discounted_returns(first["reward"], gamma)[:n].mean())
    gap = q_mean - true_value
    # relative: None where the true value is ~0 (a grid-world episode ending in a trap at once)
    rel = gap / abs(true_value) if abs(true_value) > MIN_TRUE_VALUE else None
    return _score(episodes, episode_steps) | {"q_mean": q_mean, "true_value": true_value, "overestimation_true": gap,
                                              "overestimation_true_rel": rel}
