"""Token files in nanoGPT's format: a flat array of uint16 token ids with no header
(`train.bin`, `val.bin`, as nanoGPT's data/*/prepare.py writes them), read through a memmap so
a file of billions of tokens costs no memory."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from paperline.io import DataError

CHECK_TOKENS = 10_000_000  # the ids checked against the vocabulary when a file is opened


def open_tokens(path: str | Path, vocab_size: int, block_size: int) -> np.memmap:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such token file (nanoGPT format: flat uint16 ids)")
    if path.stat().st_size % 2:
        raise DataError(f"{path}: {path.stat().st_size} bytes is not a whole number of uint16 tokens")
    tokens = np.memmap(path, dtype=np.uint16, mode="r")
    if len(tokens) <= block_size + 1:
        raise DataError(f"{path}: {len(tokens)} tokens, fewer than block_size + 2 = {block_size + 2}")
    head = int(tokens[:CHECK_TOKENS].max())
    if head >= vocab_size:
        raise DataError(f"{path}: token id {head} ≥ vocab_size {vocab_size}")
    return tokens


def sample_windows(tokens: np.ndarray, batch_size: int, block_size: int,
                   generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, next-token targets), each (batch_size, block_size) int64, at random offsets."""
    starts = torch.randint(len(tokens) - block_size - 1, (batch_size,), generator=generator).tolist()
    x = np.stack([np.asarray(tokens[s:s + block_size], dtype=np.int64) for s in starts])
    y = np.stack([np.asarray(tokens[s + 1:s + 1 + block_size], dtype=np.int64) for s in starts])
    return torch.from_numpy(x), torch.from_numpy(y)
