"""Per-pixel standardization with training-set statistics (constant border pixels keep scale 1)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Standardizer:
    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, x: np.ndarray) -> "Standardizer":
        std = x.std(axis=0)
        return cls(mean=x.mean(axis=0), std=np.where(std > 1e-8, std, 1.0))

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return (x - self.mean) / self.std
