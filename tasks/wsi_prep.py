"""Tasks of the WSI data-prep flows (flows/prep_wsi.py: wsi-cohort, wsi-downsample, til-maps): a
chunk of slides each, wrapping paperline/data/wsi_prep.py's per-slide functions.

Parameters: `wsi.profiles.<profile>` in params/wsi.yaml, validated into WSIPrepConfig before any work.
The profile is the one `ztsurv.profile` names (the method that reads these data), so one switch
sets data and model scale together; `--profile` overrides it. Outputs go under <project>/data/wsi/
(PAPERLINE_ROOT, as everywhere); the texture slide is read from data/raw/ (the project's, else the
code checkout's).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.config import load_data_config
from paperline.data import wsi_prep, wsi_synth
from paperline.data.wsi_prep import WSIPrepConfig
from tasks.paths import committed_data_path, params_path, repo_path

SECTION = "wsi"
FOLLOWS = "ztsurv"  # whose `profile` picks the data profile


def data_dir() -> Path:
    return repo_path("data", "wsi")


def raw_dir() -> Path:
    return committed_data_path("data/raw")


def resolve(params: dict[str, Any], profile: str | None = None,
            overrides: Sequence[str] = ()) -> tuple[str, WSIPrepConfig]:
    return load_data_config(WSIPrepConfig, params, SECTION, FOLLOWS, profile, overrides, params_path().name)


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
make_patients = task(wsi_synth.make_patients, name="wsi-synthesize-slides", cache_policy=NO_CACHE)
downsample_slides = task(wsi_prep.downsample_slides, name="wsi-downsample-slides", cache_policy=NO_CACHE)
register_til_maps = task(wsi_prep.register_til_maps, name="wsi-register-til-maps", cache_policy=NO_CACHE)
