"""scikit-learn's digits (1,797 real 8×8 images, shipped inside the package), read from the file
`load_digits` reads, without importing `sklearn.datasets` (≈ 3 s, 12 s on a loaded machine, of a
stage's start). A test compares the two."""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

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


Scaling = Literal["unit", "standard"]


# The seeded split the digits methods train and score on (LoTA-QAF, Model Shapley, SUMO, NGN-M):
# stratified (each class's rows permuted, its first rows validation, the next test, the rest
# training), the pixels scaled to [0, 1] (/ 16) or standardized per pixel with the training rows'
# mean and std (a constant pixel keeps scale 1).
@dataclass(frozen=True)
class DigitsRows:
    x: np.ndarray  # (1797, 64) float32, scaled
    y: np.ndarray  # (1797,) int64
    train: np.ndarray  # row indices of x and y, ascending
    val: np.ndarray
    test: np.ndarray


def split_digits(seed: int, test_fraction: float, val_fraction: float = 0.0, scaling: Scaling = "unit") -> DigitsRows:
    """Of each class's rows, round(val_fraction · n) validation and round(test_fraction · n) test."""
    if not (0 <= val_fraction and 0 <= test_fraction and val_fraction + test_fraction < 1):
        raise ValueError(f"split_digits: fractions val {val_fraction}, test {test_fraction}: "
                         "each ≥ 0, together below 1")
    x, y = read_digits()
    rng = np.random.default_rng(seed)
    parts: dict[str, list[np.ndarray]] = {"train": [], "val": [], "test": []}
    for label in range(CLASSES):
        rows = rng.permutation(np.flatnonzero(y == label))
        n_val, n_test = round(val_fraction * len(rows)), round(test_fraction * len(rows))
        parts["val"].append(rows[:n_val])
        parts["test"].append(rows[n_val:n_val + n_test])
        parts["train"].append(rows[n_val + n_test:])
    train, val, test = (np.sort(np.concatenate(parts[k])) for k in ("train", "val", "test"))
    if scaling == "unit":
        x = x / 16.0
    elif scaling == "standard":
        std = x[train].std(axis=0)
        x = (x - x[train].mean(axis=0)) / np.where(std > 1e-8, std, 1.0)
    else:
        raise ValueError(f"split_digits: scaling {scaling!r}: expected 'unit' or 'standard'")
    return DigitsRows(x.astype(np.float32), y, train, val, test)
