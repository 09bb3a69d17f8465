"""scikit-learn's digits (1,797 real 8×8 images, shipped inside the package), read from the file
`load_digits` reads, without importing `sklearn.datasets` (≈ 3 s, 12 s on a loaded machine, of a
stage's start). A test compares the two."""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from paperline.io import DataError

FEATURES, CLASSES = 64, 10


def digits_file() -> Path:
    """The file load_digits reads (what a run's data version hashes)."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise DataError("scikit-learn is not installed: it ships the digits data set")
    return Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data" / "digits.csv.gz"


def read_digits() -> tuple[np.ndarray, np.ndarray]:
    """(1797, 64) pixel counts 0..16 as float64 and int64 labels, as load_digits returns them."""
    path = digits_file()
    if not path.is_file():
        raise DataError(f"{path}: missing from the scikit-learn installation")
    table = np.loadtxt(path, delimiter=",")
    if table.ndim != 2 or table.shape[1] != FEATURES + 1:
        raise DataError(f"{path}: shape {table.shape}: expected (N, {FEATURES + 1})")
    return table[:, :-1], table[:, -1].astype(np.int64)


# The seeded split LoTA-QAF (train/test) and Model Shapley (train/val/test) train and score on:
# pixels / 16, one permutation of the rows, its first rows validation, the next test, the rest training.
@dataclass(frozen=True)
class DigitsRows:
    x: np.ndarray  # (1797, 64) float32, pixels / 16
    y: np.ndarray  # (1797,) int64
    train: np.ndarray  # row indices of x and y
    val: np.ndarray
    test: np.ndarray


def split_digits(seed: int, test_fraction: float, val_fraction: float = 0.0) -> DigitsRows:
    x, y = read_digits()
    x = (x / 16.0).astype(np.float32)
    order = np.random.default_rng(seed).permutation(len(x))
    n_val, n_test = round(val_fraction * len(x)), round(test_fraction * len(x))
    return DigitsRows(x, y, order[n_val + n_test:], order[:n_val], order[n_val:n_val + n_test])
