"""The nbody stage's task (flows/prep_nbody.py) and what GeoAda asks of it.

Parameters: `nbody.profiles.<profile>` in params/nbody.yaml, validated into NBodyConfig before any work;
the profile is the one `geoada.profile` names (the method that reads the folder). Writes
<project>/<nbody.out>/ (the EGNN-layout .npy splits and nbody.json).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.config import load_data_config
from paperline.data.nbody import RECORD_FILE, NBodyConfig, build_nbody, nbody_fingerprint
from paperline.io import read_json
from tasks.paths import params_path, project_path

SECTION = "nbody"
FOLLOWS = "geoada"  # whose `profile` picks the data's profile


def resolve(params: dict[str, Any], profile: str | None = None,
            overrides: Sequence[str] = ()) -> tuple[str, NBodyConfig]:
    return load_data_config(NBodyConfig, params, SECTION, FOLLOWS, profile, overrides, params_path().name)


def nbody_dir(cfg: NBodyConfig) -> Path:
    return project_path(cfg.out)


def write_nbody(cfg: NBodyConfig) -> dict:
    return build_nbody(cfg, nbody_dir(cfg))


def ensure(cfg: NBodyConfig) -> Path:
    """The stage's folder, built first when it is missing or made from other parameters (a method
    flow run alone writes exactly what `dvc repro nbody` would)."""
    out = nbody_dir(cfg)
    record = out / RECORD_FILE
    if record.is_file() and read_json(record).get("fingerprint") == nbody_fingerprint(cfg):
        return out
    print(f"nbody: {out}: {'stale' if record.is_file() else 'not built'}; building it")
    write_nbody(cfg)
    return out


# DVC owns data-level caching: no Prefect result cache.
build = task(write_nbody, name="nbody-simulate", cache_policy=NO_CACHE)
