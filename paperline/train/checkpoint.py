"""Training checkpoints: saved atomically, so a run killed at any instant resumes from the last
complete one."""
from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import torch

from paperline.io import atomic_path


def save_checkpoint(path: str | os.PathLike, state: dict[str, Any]) -> None:
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any] | None:
    """The last complete checkpoint at `path`, or None when there is none."""
    path = Path(path)
    if not path.exists():
        return None
    return torch.load(path, map_location="cpu", weights_only=False)


def load_resumable(path: str | os.PathLike | None, fingerprint: Any) -> dict[str, Any] | None:
    """The checkpoint at `path` when it was written for `fingerprint` (the settings that change
    training), else None: a checkpoint of another configuration is never mixed in; it is warned
    about and the run starts afresh (overwriting it)."""
    if path is None:
        return None
    ckpt = load_checkpoint(path)
    if ckpt is not None and ckpt.get("fingerprint") != fingerprint:
        warnings.warn(f"{path}: checkpoint is for another configuration; starting afresh")
        return None
    return ckpt
