"""PEBBLE's unsupervised pre-training reward: particle-based state entropy, r(s) = log(c + ‖s − s_k‖)
with s_k the k-th nearest neighbour of s among the states in the buffer, normalised by a running
estimate of its standard deviation."""
from __future__ import annotations

import numpy as np
import torch


def knn_entropy_reward(states: np.ndarray, reference: np.ndarray, k: int = 5, c: float = 1.0,
                       chunk: int = 2048) -> np.ndarray:
    """log(c + distance to the k-th nearest reference state), per state (a state in `reference`
    is its own 0th neighbour, so k counts others)."""
    x = torch.as_tensor(states, dtype=torch.float32)
    dists = []
    for lo in range(0, len(reference), chunk):
        dists.append(torch.cdist(x, torch.as_tensor(reference[lo:lo + chunk], dtype=torch.float32)))
    d = torch.cat(dists, 1)
    kth = d.topk(min(k + 1, d.shape[1]), dim=1, largest=False).values[:, -1]
    return torch.log(c + kth).numpy()


class RunningStd:
    """Running mean/variance (Chan et al.'s batch merge); `normalise` divides by the std (PEBBLE's scaling)."""

    def __init__(self):
        self.n, self.mean, self.m2 = 0, 0.0, 0.0

    def update(self, x: np.ndarray) -> None:
        x = np.asarray(x, float).ravel()
        if not len(x):
            return
        n, mean, m2 = len(x), float(x.mean()), float(((x - x.mean()) ** 2).sum())
        total = self.n + n
        delta = mean - self.mean
        self.mean += delta * n / total
        self.m2 += m2 + delta ** 2 * self.n * n / total
        self.n = total

    def normalise(self, x: np.ndarray) -> np.ndarray:
        std = np.sqrt(self.m2 / self.n) if self.n > 1 else 1.0
        return x / max(std, 1e-8)

    def state_dict(self) -> dict:
        return {"n": self.n, "mean": self.mean, "m2": self.m2}

    def load_state_dict(self, state: dict) -> None:
        self.n, self.mean, self.m2 = state["n"], state["mean"], state["m2"]
