"""Finished-unit records: the result of one unit of work (a variant at a seed, a group) kept in the
run directory, so that a killed run resumes past the units it had finished. A unit too short to
checkpoint inside (a minute or less) is recorded whole; a long training loop checkpoints with
`Resumable` (checkpoint.py) instead."""
from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any, Callable, TypeVar

from paperline.io import atomic_path, json_digest, read_json, write_json

T = TypeVar("T")


def read_unit(path: str | os.PathLike, fingerprint: Any) -> Any | None:
    """The result recorded at `path` for `fingerprint` (the settings that make it, JSON-able); None
    when there is no record, or one of other settings (never mixed in)."""
    path = Path(path)
    if not path.is_file():
        return None
    if path.suffix == ".json":
        saved = read_json(path)
    elif path.suffix == ".pt":
        from paperline.train.checkpoint import load_checkpoint  # torch only for a .pt record

        saved = load_checkpoint(path)
    else:
        saved = pickle.loads(path.read_bytes())
    return saved["result"] if isinstance(saved, dict) and saved.get("fingerprint") == json_digest(fingerprint) else None


def write_unit(path: str | os.PathLike, fingerprint: Any, result: Any) -> None:
    """Record `result` at `path` for `fingerprint`, atomically: JSON for `.json` paths, torch's
    format for `.pt` (a result with tensors in it: weights, read back onto the CPU; the file is a
    checkpoint a run may log), else a pickle (a result with arrays in it)."""
    path = Path(path)
    record = {"fingerprint": json_digest(fingerprint), "result": result}
    if path.suffix == ".json":
        write_json(path, record)
    elif path.suffix == ".pt":
        from paperline.train.checkpoint import save_checkpoint  # torch only for a .pt record

        save_checkpoint(path, record)
    else:
        with atomic_path(path) as tmp:
            tmp.write_bytes(pickle.dumps(record))


def finished_unit(path: str | os.PathLike, fingerprint: Any, compute: Callable[[], T]) -> T:
    """`compute()`'s result, read back from `path` when it was recorded there for `fingerprint`, else
    computed and recorded (over any record of other settings). A unit whose work is done elsewhere (one
    simulation trains several) uses `read_unit` and `write_unit` directly."""
    saved = read_unit(path, fingerprint)
    if saved is not None:
        return saved
    result = compute()
    write_unit(path, fingerprint, result)
    return result
