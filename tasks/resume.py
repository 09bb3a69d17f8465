"""Resume a killed flow run from its checkpoints, start a finished or changed one afresh.

`models/<method>/run.json` records the config hash of the run that owns the directory, its MLflow
parent run, and whether it completed. A new run of the same config after a crash keeps the
checkpoints (training tasks resume from them); a run after a completed one, or with another
config, clears the directory first. DVC keeps the directory between runs (`persist: true`).
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from paperline.io import json_digest, read_json, write_json
from tasks.paths import models_dir


def config_hash(config: Mapping[str, Any]) -> str:
    return json_digest(config)


@dataclass(frozen=True)
class RunDir:
    path: Path
    config_hash: str
    resumed: bool
    previous_parent_run: str | None

    @property
    def state_file(self) -> Path:
        return self.path / "run.json"

    def record_parent(self, run_id: str) -> None:
        write_json(self.state_file, {"config_hash": self.config_hash, "parent_run": run_id,
                                     "complete": False})

    def mark_complete(self) -> None:
        state = read_json(self.state_file)
        write_json(self.state_file, state | {"complete": True})


def open_run_dir(method: str, config: Mapping[str, Any]) -> RunDir:
    path = models_dir(method)
    digest = config_hash(config)
    state_file = path / "run.json"
    state = read_json(state_file) if state_file.exists() else None
    if state and state.get("config_hash") == digest and not state.get("complete"):
        return RunDir(path, digest, True, state.get("parent_run"))
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return RunDir(path, digest, False, None)
