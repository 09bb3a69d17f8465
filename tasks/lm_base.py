"""The lm-base stage's task (flows/prep_lm.py) and what the adaptation methods ask of it.

Parameters: `lm_base.profiles.<profile>` in params/lm_base.yaml, validated into LMBaseConfig before any
work; the profile is the one `tpa.profile` names (the scale switch of the LM methods: the tiny DAG
and the embedded default set every method's profile together). Writes <project>/<lm_base.out>/ (a
transformers model directory, lm_base.json; train.pt while training, to resume a killed run).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Sequence

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.config import load_data_config
from paperline.data.lm_base import RECORD_FILE, LMBaseConfig
from paperline.io import read_json
from tasks.paths import params_path, project_path

SECTION = "lm_base"
FOLLOWS = "tpa"  # whose `profile` picks the base's profile


def resolve(params: dict[str, Any], profile: str | None = None,
            overrides: Sequence[str] = ()) -> tuple[str, LMBaseConfig]:
    return load_data_config(LMBaseConfig, params, SECTION, FOLLOWS, profile, overrides, params_path().name)


def base_dir(cfg: LMBaseConfig) -> Path:
    return project_path(cfg.out)


def write_base(cfg: LMBaseConfig, distributed: Any = None, devices: Sequence[Any] | None = None) -> dict:
    """Train the base into its folder: on `devices` (torch devices) spread by `distributed`
    (runtime.distributed), or in this process on the CPU (a method flow building a missing base)."""
    from paperline.train.lm_base import build_lm_base

    if not devices:
        return build_lm_base(cfg, project_path(cfg.corpus), base_dir(cfg), progress=sys.stderr.isatty())
    return build_lm_base(cfg, project_path(cfg.corpus), base_dir(cfg), progress=sys.stderr.isatty(),
                         distributed=distributed, device=devices[0], device_indices=[d.index for d in devices])


def train_base(cfg: LMBaseConfig, distributed: Any) -> dict:
    """The stage's training: it holds one `gpu` slot per device `runtime.distributed` names."""
    from tasks.runners import gpu_devices

    with gpu_devices(distributed.devices) as devices:
        return write_base(cfg, distributed, devices)


def ensure(cfg: LMBaseConfig) -> Path:
    """The stage's folder, built first when it is missing or made from other parameters or another
    corpus (a method flow run alone writes exactly what `dvc repro lm-base` would)."""
    from paperline.data.text_corpus import load_corpus
    from paperline.train.lm_base import lm_base_fingerprint

    out = base_dir(cfg)
    record = out / RECORD_FILE
    corpus = load_corpus(project_path(cfg.corpus), cfg.block_size)
    if record.is_file() and read_json(record).get("fingerprint") == lm_base_fingerprint(cfg, corpus.meta.get("fingerprint")):
        return out
    print(f"lm-base: {out}: {'stale' if record.is_file() else 'not built'}; building it")
    write_base(cfg)
    return out


# DVC owns data-level caching: no Prefect result cache.
build = task(train_base, name="lm-base-train", cache_policy=NO_CACHE)
