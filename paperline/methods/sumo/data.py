"""Real 8×8 handwritten digits (UCI optdigits test set, 1,797 images) as shipped by scikit-learn:
`sklearn/datasets/data/digits.csv.gz` (64 pixel columns with values 0–16, then the label). No
download: the file is part of the pinned scikit-learn wheel."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from paperline.data.digits import split_digits


@dataclass(frozen=True)
class DigitsSplit:
    x_train: torch.Tensor  # (N_train, 64) float32, standardized with the training statistics
    y_train: torch.Tensor  # (N_train,) int64
    x_test: torch.Tensor
    y_test: torch.Tensor

    def to(self, device: torch.device) -> "DigitsSplit":
        return DigitsSplit(*(t.to(device) for t in (self.x_train, self.y_train, self.x_test, self.y_test)))


def load_digits_split(test_fraction: float, split_seed: int = 0) -> DigitsSplit:
    """The digits methods' stratified split (`paperline.data.digits.split_digits`), standardized
    with the training statistics (the same for a given split_seed on every machine)."""
    rows = split_digits(split_seed, test_fraction, scaling="standard")
    return DigitsSplit(*(torch.as_tensor(a) for a in (rows.x[rows.train], rows.y[rows.train],
                                                      rows.x[rows.test], rows.y[rows.test])))


def c4_version(c4_dir: str | Path, tokenizer: str | Path) -> str:
    """The data version of a LLaMA-on-C4 run: sha256 of the shards' names and sizes (hundreds of GB
    are not hashed) and of the tokenizer file. A missing folder or tokenizer, or a shard whose first
    document cannot be read, is an error naming it (before any training)."""
    import hashlib

    from paperline.data.c4 import c4_shards, check_shards

    digest = hashlib.sha256()
    for split in ("train", "validation"):
        shards = c4_shards(c4_dir, split)
        check_shards(shards)
        for shard in shards:
            digest.update(f"{shard.name}:{shard.stat().st_size}".encode())
    tokenizer = Path(tokenizer)
    if not tokenizer.is_file():
        raise FileNotFoundError(f"{tokenizer}: no such tokenizer file (sumo lm.tokenizer: a tokenizer.json)")
    digest.update(tokenizer.read_bytes())
    return "c4-sha256:" + digest.hexdigest()[:16]
