"""A replay buffer that keeps the true reward beside the reward the agent learns from (relabelled
by a reward model after each reward update), and the episode each step belongs to, so segments of
consecutive steps can be drawn for preference queries."""
from __future__ import annotations

from typing import Callable

import numpy as np

FIELDS = ("obs", "act", "next_obs", "true_reward", "reward", "terminated", "episode", "t")


class ReplayBuffer:
    def __init__(self, capacity: int, obs_dim: int, act_dim: int):
        self.capacity, self.size, self.pos = capacity, 0, 0
        self.obs = np.zeros((capacity, obs_dim), np.float32)
        self.act = np.zeros((capacity, act_dim), np.float32)
        self.next_obs = np.zeros((capacity, obs_dim), np.float32)
        self.true_reward = np.zeros(capacity, np.float32)
        self.reward = np.zeros(capacity, np.float32)  # what the agent learns from (true or r̂)
        self.terminated = np.zeros(capacity, np.float32)
        self.episode = np.full(capacity, -1, np.int64)
        self.t = np.zeros(capacity, np.int64)  # step within its episode

    def add(self, obs, act, next_obs, true_reward: float, reward: float, terminated: bool, episode: int,
            t: int) -> None:
        i = self.pos
        self.obs[i], self.act[i], self.next_obs[i] = obs, act, next_obs
        self.true_reward[i], self.reward[i], self.terminated[i] = true_reward, reward, float(terminated)
        self.episode[i], self.t[i] = episode, t
        self.pos = (self.pos + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample(self, rng: np.random.Generator, batch: int) -> dict[str, np.ndarray]:
        idx = rng.integers(0, self.size, batch)
        return {k: getattr(self, k)[idx] for k in ("obs", "act", "next_obs", "reward", "terminated")}

    def relabel(self, reward_fn: Callable[[np.ndarray, np.ndarray], np.ndarray], chunk: int = 4096) -> None:
        """Every stored reward replaced by reward_fn(obs, act) (the reward model's mean)."""
        for lo in range(0, self.size, chunk):
            hi = min(lo + chunk, self.size)
            self.reward[lo:hi] = reward_fn(self.obs[lo:hi], self.act[lo:hi])

    def segment_starts(self, length: int) -> np.ndarray:
        """Indices i whose steps i..i+length-1 are consecutive steps of one episode (no wrap)."""
        n = self.size
        if n < length:
            return np.zeros(0, np.int64)
        i = np.arange(n - length + 1)
        # a wrapped (full) buffer's seam joins two episodes: their ids differ, so it is excluded too
        return i[(self.episode[i] == self.episode[i + length - 1]) & (self.t[i + length - 1] - self.t[i] == length - 1)]

    def state_dict(self) -> dict:
        return {"size": self.size, "pos": self.pos} | {k: getattr(self, k)[:self.size].copy() for k in FIELDS}

    def load_state_dict(self, state: dict) -> None:
        self.size, self.pos = state["size"], state["pos"]
        for k in FIELDS:
            getattr(self, k)[:self.size] = state[k]
