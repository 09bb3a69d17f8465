"""load_split reads a feature set's files once a run (every variant and seed shares them) and again
when the semg stage rebuilt the set."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from paperline.methods.splashnet.config import SplashNetConfig
from paperline.methods.splashnet.pipeline import load_split

SIZES = {name: {"mlp_features": [8], "block_channels": [4]} for name in ("baseline", "splashnet_mini", "splashnet")}


def _write_features(folder: Path, level: float) -> None:
    folder.mkdir(exist_ok=True)
    sessions = []
    for user in range(3):
        for s in range(2):
            name = f"user{user}_s{s}"
            np.savez(folder / f"{name}.npz", logspec33=np.full((40, 2, 16, 33), level, np.float16),
                     bands6=np.full((40, 2, 16, 6), -level, np.float16), frame_time=np.arange(40.0),
                     key_time=np.array([3.0]), key_label=np.array([1]))
            sessions.append({"name": name, "user": f"user{user}", "file": f"{name}.npz"})
    (folder / "index.json").write_text(json.dumps({"fingerprint": "f", "sessions": sessions}))


def test_sessions_are_read_once_and_again_after_a_rebuild(tmp_path):
    cfg = SplashNetConfig(sizes=SIZES, data={"test_users": 1, "test_sessions_per_user": 1})
    _write_features(tmp_path, 1.0)
    train, finetune, test, _ = load_split(cfg, tmp_path, six_bands=False)
    again = load_split(cfg, tmp_path, six_bands=False)[0]
    assert len(train) == 4 and [s.user for s in test["user2"]] == ["user2"] and len(finetune["user2"]) == 1
    assert all(a is b for a, b in zip(train, again))  # shared, not read again
    assert train[0].features.dtype == np.float32 and float(train[0].features.max()) == 1.0
    assert float(load_split(cfg, tmp_path, six_bands=True)[0][0].features.max()) == -1.0
    index = tmp_path / "index.json"
    stamp = index.stat().st_mtime_ns
    _write_features(tmp_path, 2.0)  # the stage rewrote every file, the index last
    os.utime(index, ns=(stamp + 1_000_000, stamp + 1_000_000))  # a coarse clock still moves on
    assert float(load_split(cfg, tmp_path, six_bands=False)[0][0].features.max()) == 2.0
