"""The vit-source stage's task (flows/prep_vision.py) and what the vision methods ask of it.

Parameters: `vit_source.profiles.<profile>` in params/vit_source.yaml, validated into VitSourceConfig before
any work; the profile is the one `codemerge.profile` names (the method that reads the folder), so
one switch sets data and model scale together. Writes <project>/<vit_source.out>/ (images.npz,
classifier.pt, source.json; train.pt to resume a killed training).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Sequence

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.config import load_data_config
from paperline.data.vit_source import RECORD_FILE, VitSourceConfig
from paperline.io import read_json
from tasks.paths import params_path, project_path

SECTION = "vit_source"
FOLLOWS = "codemerge"  # whose `profile` picks the source model's profile


def resolve(params: dict[str, Any], profile: str | None = None,
            overrides: Sequence[str] = ()) -> tuple[str, VitSourceConfig]:
    return load_data_config(VitSourceConfig, params, SECTION, FOLLOWS, profile, overrides, params_path().name)


def source_dir(cfg: VitSourceConfig) -> Path:
    return project_path(cfg.out)


def write_source(cfg: VitSourceConfig) -> dict:
    from paperline.train.vit import build_vit_source

    return build_vit_source(cfg, source_dir(cfg), project_path(cfg.checkpoint) if cfg.checkpoint else None,
                            progress=sys.stderr.isatty())


def ensure(cfg: VitSourceConfig) -> Path:
    """The stage's folder, built first when it is missing or made from other parameters (a method
    flow run alone writes exactly what `dvc repro vit-source` would)."""
    from paperline.train.vit import source_fingerprint

    out = source_dir(cfg)
    record = out / RECORD_FILE
    if record.is_file() and read_json(record).get("fingerprint") == source_fingerprint(cfg):
        return out
    print(f"vit-source: {out}: {'stale' if record.is_file() else 'not built'}; building it")
    write_source(cfg)
    return out


# DVC owns data-level caching: no Prefect result cache.
build = task(write_source, name="vit-source-train", cache_policy=NO_CACHE)
