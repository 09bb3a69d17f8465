"""Training checkpoints: saved atomically, so a run killed at any instant resumes from the last
complete one; `Resumable`, the resume logic every hand-written training loop shares."""
from __future__ import annotations

import os
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from paperline.io import atomic_path

# Resumable's layout; a checkpoint of an older one counts as another configuration (starts afresh)
CHECKPOINT_FORMAT = 2


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


class Resumable:
    """The checkpoint of one training run, as its loop uses it:

        run = Resumable(path, fingerprint, every=100, model=model, optimizer=optimizer, generator=generator)
        progress = run.resume() or {"step": 0, "history": []}  # model, optimizer, generator loaded in place
        while progress["step"] < steps:
            ...                                                 # one step, its history appended
            progress["step"] += 1
            if run.due(progress["step"], steps):
                run.save(progress)
        seconds = run.elapsed()

    `state` is what a resume restores in place: modules, optimizers and lr schedulers (state_dict /
    load_state_dict), torch generators (get_state / set_state: a loop's own random stream, or
    torch.default_generator for the global one). `progress` is the loop's own plain record (step,
    history, whatever else it needs to go on exactly), saved as it is given. A checkpoint written
    for another fingerprint (the settings that change training) is never mixed in: a warning, and
    the run starts afresh. Without a path nothing is saved or resumed. `elapsed()` is the wall
    time of every try of the run, this one included (work lost after the last save not counted).
    """

    def __init__(self, path: str | os.PathLike | None, fingerprint: Any, every: int | None = None, **state):
        self.path = None if path is None else Path(path)
        self.fingerprint = {"format": CHECKPOINT_FORMAT, "run": fingerprint}
        self.every, self.state = every, state
        self.elapsed_before, self.started = 0.0, time.perf_counter()

    def resume(self) -> dict | None:
        """The saved progress, with `state` loaded, when the checkpoint is this run's; else None."""
        ckpt = load_resumable(self.path, self.fingerprint)
        self.started = time.perf_counter()
        if ckpt is None:
            return None
        for name, obj in self.state.items():
            if isinstance(obj, torch.Generator):
                obj.set_state(ckpt["state"][name])
            else:
                obj.load_state_dict(ckpt["state"][name])
        self.elapsed_before = ckpt["elapsed"]
        return ckpt["progress"]

    def due(self, step: int, last: int) -> bool:
        """Whether to save after `step`: every `every` steps and after the last one."""
        return step == last or bool(self.every and step % self.every == 0)

    def save(self, progress: dict) -> None:
        if self.path is None:
            return
        state = {name: obj.get_state() if isinstance(obj, torch.Generator) else obj.state_dict()
                 for name, obj in self.state.items()}
        save_checkpoint(self.path, {"fingerprint": self.fingerprint, "elapsed": self.elapsed(),
                                    "state": state, "progress": progress})

    def elapsed(self) -> float:
        return self.elapsed_before + time.perf_counter() - self.started
