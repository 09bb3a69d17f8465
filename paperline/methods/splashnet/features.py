"""The `semg-normalize` stage's work: log-spectrogram features of every session (33 bins and the
6 summed bands), each session's keystroke labels at frame times, and the per-user channel
statistics that show the cross-user shift before and after rolling time normalization."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from paperline.data.chunks import ChunkMap, map_serially
from paperline.data.emg2qwerty import CHAR_TO_LABEL, SAMPLE_RATE, SessionRef, key_to_char, read_session
from paperline.io import atomic_path, read_json, write_json
from paperline.methods.splashnet.transforms import HOP, N_FFT, log_spectrogram, rolling_time_norm, six_bands

INDEX = "index.json"
STATS = "stats.json"


@dataclass
class SessionFeatures:
    """One session's features in memory (float32) and its keystrokes as (press time, label)."""

    name: str
    user: str
    features: np.ndarray  # (T', 2, 16, F)
    frame_time: np.ndarray  # (T',) the time of each frame's centre sample
    key_time: np.ndarray
    key_label: np.ndarray

    def labels_between(self, frame_start: int, frame_stop: int) -> np.ndarray:
        t0 = self.frame_time[frame_start]
        t1 = self.frame_time[frame_stop] if frame_stop < len(self.frame_time) else np.inf
        return self.key_label[(self.key_time >= t0) & (self.key_time < t1)]


def featurize(ref: SessionRef, out_dir: Path) -> dict[str, Any]:
    session = read_session(ref.path)
    logspec = log_spectrogram(torch.from_numpy(session.emg))
    bands = six_bands(logspec)
    centres = np.arange(logspec.shape[0]) * HOP + N_FFT // 2
    keys = [(k["start"], CHAR_TO_LABEL[c]) for k in session.keystrokes if (c := key_to_char(k["key"])) is not None]
    name = f"{session.session_name}.npz"
    with atomic_path(out_dir / name) as tmp:
        with open(tmp, "wb") as f:  # float16: features are log10 values of a few units
            np.savez(f, logspec33=logspec.numpy().astype(np.float16), bands6=bands.numpy().astype(np.float16),
                     frame_time=session.time[centres], key_time=np.array([k[0] for k in keys]),
                     key_label=np.array([k[1] for k in keys], dtype=np.int64))
    return {"name": session.session_name, "user": session.user, "file": name, "frames": int(logspec.shape[0]),
            "keystrokes": len(keys), "seconds": float(len(session.time) / SAMPLE_RATE)}


def channel_statistics(out_dir: Path, entries: Sequence[dict], rtn_warmup: int, rtn_eps: float) -> dict[str, Any]:
    """Per user: the mean and spread of every (hand, electrode) channel's 6-band features (averaged
    over bands), raw and after RTN over each whole session. The cross-user spread of the channel
    means is the shift a zero-shot model meets; RTN should shrink it."""
    per_user: dict[str, dict[str, list]] = {}
    for entry in entries:
        with np.load(out_dir / entry["file"]) as z:
            bands = torch.from_numpy(z["bands6"].astype(np.float32))
        normalized = rolling_time_norm(bands, rtn_warmup, rtn_eps)
        row = per_user.setdefault(entry["user"], {"raw_mean": [], "raw_std": [], "rtn_mean": [], "rtn_std": []})
        row["raw_mean"].append(bands.mean((0, 3)).numpy())
        row["raw_std"].append(bands.std(0).mean(-1).numpy())
        row["rtn_mean"].append(normalized.mean((0, 3)).numpy())
        row["rtn_std"].append(normalized.std(0).mean(-1).numpy())
    users = {u: {k: np.mean(v, axis=0).round(4).tolist() for k, v in row.items()} for u, row in sorted(per_user.items())}
    summary = {}
    for kind in ("raw", "rtn"):
        means = np.array([users[u][f"{kind}_mean"] for u in users])  # (users, 2, 16)
        summary[f"{kind}_cross_user_std_of_channel_means"] = float(means.std(0).mean())
    return {"users": users, "summary": summary}


def featurize_sessions(refs: Sequence[SessionRef], out_dir: str | Path) -> list[dict[str, Any]]:
    """`featurize` for each session (a chunk of sessions, one task's work)."""
    return [featurize(ref, Path(out_dir)) for ref in refs]


def write_features(refs: Sequence[SessionRef], out_dir: Path, rtn_warmup: int, rtn_eps: float,
                   fingerprint: str, map_chunks: ChunkMap = map_serially) -> dict[str, Any]:
    out_dir.mkdir(parents=True, exist_ok=True)
    entries = map_chunks(featurize_sessions, list(refs), out_dir=str(out_dir))
    stats = channel_statistics(out_dir, entries, rtn_warmup, rtn_eps)
    write_json(out_dir / STATS, stats)
    index = {"fingerprint": fingerprint, "sessions": entries}
    write_json(out_dir / INDEX, index)  # last: its presence marks a complete feature set
    return index


def read_index(features_dir: Path) -> dict[str, Any]:
    path = features_dir / INDEX
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no feature index (run the semg-normalize stage: "
                                "python -m flows run semg-normalize)")
    return read_json(path)


def load_session_features(features_dir: Path, entry: dict, use_six_bands: bool) -> SessionFeatures:
    path = features_dir / entry["file"]
    try:
        with np.load(path) as z:
            feats = z["bands6" if use_six_bands else "logspec33"].astype(np.float32)
            return SessionFeatures(entry["name"], entry["user"], feats, z["frame_time"], z["key_time"], z["key_label"])
    except (OSError, KeyError, ValueError) as err:
        raise ValueError(f"{path}: unreadable feature file ({err})") from None


def manifest_refs(manifest: dict) -> list[SessionRef]:
    return [SessionRef(**s) for s in manifest["sessions"]]


def dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True)
