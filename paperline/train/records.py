"""Finished-unit records: the result of one unit of work (a variant at a seed, a group) kept in the
run directory, so that a killed run resumes past the units it had finished. A unit too short to
checkpoint inside (a minute or less) is recorded whole; a long training loop checkpoints with
`Resumable` (checkpoint.py) instead."""
from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any, Callable, TypeVar

from paperline.io import atomic_path, json_digest, read_json

T = TypeVar("T")


def finished_unit(path: str | os.PathLike, fingerprint: Any, compute: Callable[[], T]) -> T:
    """`compute()`'s result, read back from `path` when a record there was written for `fingerprint`
    (the settings that make the result, JSON-able), else computed and written atomically with it: a
    record of other settings is recomputed and overwritten, never mixed in. `.json` paths hold JSON
    results, others a pickle (a result with arrays in it)."""
    path = Path(path)
    as_json = path.suffix == ".json"
    key = json_digest(fingerprint)
    if path.is_file():
        saved = read_json(path) if as_json else pickle.loads(path.read_bytes())
        if isinstance(saved, dict) and saved.get("fingerprint") == key:
            return saved["result"]
    result = compute()
    record = {"fingerprint": key, "result": result}
    with atomic_path(path) as tmp:
        if as_json:
            tmp.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        else:
            tmp.write_bytes(pickle.dumps(record))
    return result
