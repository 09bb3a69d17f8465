"""Offline RL data in the formats the field publishes, read and written without their packages:

- **D4RL-style HDF5**: top-level datasets `observations` [N, d], `actions` [N, a], `rewards` [N],
  `terminals` [N], `timeouts` [N] (an episode ends after a terminal or a timeout row).
- **Minari HDF5** (`main_data.hdf5`): a group `episode_<k>` per episode with `observations`
  [T+1, d], `actions` [T, a], `rewards` [T], `terminations` [T], `truncations` [T].
- **Preference Transformer's label files** (Kim et al. 2023, its `human_label/<dataset>/` folders):
  three pickles, `indices_num<N>…` (the start of each pair's first segment), `indices_2_num<N>…`
  (of its second), `label_human` (per pair 0: the first preferred, 1: the second, -1: equally
  preferable). A start indexes the *transitions* of the dataset as D4RL's `qlearning_dataset` makes
  them (timeout rows dropped: their next observation belongs to the next episode); a segment is
  the `segment` transitions from it, the length the files do not record (PT: 25, or 100 for its
  human labels). Only pickles of plain ints, lists and numpy arrays are read.

Both loaders check every field's presence, dtype kind and shape before anything trains, and name
the file and the field in the error (`OfflineDataError`, a `DataError`). `Transitions` is what
the learners take: flat (s, a, r, s′, terminal) with each transition's episode and step."""
from __future__ import annotations

import io
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from paperline.io import DataError

D4RL_FIELDS = ("observations", "actions", "rewards", "terminals", "timeouts")
MINARI_FIELDS = ("observations", "actions", "rewards", "terminations", "truncations")
LABEL_FILES = ("indices_num", "indices_2_num", "label_human")  # prefixes of PT's three pickles


class OfflineDataError(DataError):
    """An offline file the run cannot use; the message names the file and the field."""


@dataclass
class Transitions:
    obs: np.ndarray  # [n, d] float32
    act: np.ndarray  # [n, a] float32
    reward: np.ndarray  # [n] float32 (the file's reward: the true one, never seen by preference learners)
    next_obs: np.ndarray  # [n, d]
    terminal: np.ndarray  # [n] float32: no bootstrap past it
    episode: np.ndarray  # [n] int64
    t: np.ndarray  # [n] int64: step within the episode

    def __len__(self) -> int:
        return len(self.reward)

    def batch(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        """The keys `ConservativeQ.update` and SAC take (reward: the file's; relabel it before)."""
        return {"obs": self.obs[idx], "act": self.act[idx], "reward": self.reward[idx], "next_obs": self.next_obs[idx],
                "terminated": self.terminal[idx]}

    def segment_starts(self, length: int) -> np.ndarray:
        """Indices i whose transitions i..i+length-1 are consecutive steps of one episode."""
        if len(self) < length:
            return np.zeros(0, np.int64)
        i = np.arange(len(self) - length + 1)
        end = i + length - 1
        return i[(self.episode[i] == self.episode[end]) & (self.t[end] - self.t[i] == length - 1)]

    def episode_returns(self) -> np.ndarray:
        """The file reward's undiscounted return of each episode."""
        _, inverse = np.unique(self.episode, return_inverse=True)
        return np.bincount(inverse, weights=self.reward)


def _field(source, name: str, path: Path, where: str = "") -> np.ndarray:
    if name not in source:
        raise OfflineDataError(f"{path}: field '{where}{name}' is missing (expected fields: "
                               f"{', '.join(D4RL_FIELDS if not where else MINARI_FIELDS)})")
    return np.asarray(source[name][()])


def _check(arr: np.ndarray, name: str, path: Path, ndim: int, length: int | None, numeric: bool = True) -> np.ndarray:
    if arr.ndim != ndim:
        raise OfflineDataError(f"{path}: field {name!r} has shape {arr.shape}, expected {ndim}-D")
    if length is not None and arr.shape[0] != length:
        raise OfflineDataError(f"{path}: field {name!r} has {arr.shape[0]} rows, expected {length} "
                               f"(as many as 'observations')")
    if numeric and arr.dtype.kind not in "biuf":
        raise OfflineDataError(f"{path}: field {name!r} has dtype {arr.dtype}, expected numbers")
    return arr


def load_d4rl(path: str | Path) -> Transitions:
    """A D4RL-style HDF5 file -> its transitions (D4RL's `qlearning_dataset`: timeout rows and the
    last row, whose next observation is not in the file, dropped)."""
    import h5py

    path = Path(path)
    try:
        f = h5py.File(path, "r")
    except OSError as err:
        raise OfflineDataError(f"{path}: not a readable HDF5 file ({err})") from None
    with f:
        obs = _check(_field(f, "observations", path), "observations", path, 2, None)
        n = len(obs)
        act = _check(_field(f, "actions", path), "actions", path, 2, n)
        rew = _check(_field(f, "rewards", path), "rewards", path, 1, n)
        term = _check(_field(f, "terminals", path), "terminals", path, 1, n)
        timeout = _check(_field(f, "timeouts", path), "timeouts", path, 1, n)
    done = term.astype(bool) | timeout.astype(bool)
    episode = np.concatenate([[0], np.cumsum(done[:-1])]).astype(np.int64)
    starts = np.r_[0, np.flatnonzero(done[:-1]) + 1]
    t = np.arange(n) - starts[episode]
    keep = ~timeout.astype(bool)
    keep[-1] = False
    nxt = np.concatenate([obs[1:], obs[-1:]])
    return Transitions(obs[keep].astype(np.float32), act[keep].astype(np.float32), rew[keep].astype(np.float32),
                       nxt[keep].astype(np.float32), term[keep].astype(np.float32), episode[keep], t[keep])


def load_minari(path: str | Path) -> Transitions:
    """A Minari `main_data.hdf5` -> its transitions (every step: each episode holds its last
    observation)."""
    import h5py

    path = Path(path)
    try:
        f = h5py.File(path, "r")
    except OSError as err:
        raise OfflineDataError(f"{path}: not a readable HDF5 file ({err})") from None
    parts: dict[str, list] = {k: [] for k in ("obs", "act", "rew", "nxt", "term", "episode", "t")}
    with f:
        names = sorted((k for k in f if k.startswith("episode_")), key=lambda k: int(k.split("_", 1)[1]))
        if not names:
            raise OfflineDataError(f"{path}: no 'episode_<k>' groups (a Minari dataset file)")
        for e, name in enumerate(names):
            g, where = f[name], f"{name}/"
            obs = _check(_field(g, "observations", path, where), where + "observations", path, 2, None)
            T = len(obs) - 1
            act = _check(_field(g, "actions", path, where), where + "actions", path, 2, T)
            rew = _check(_field(g, "rewards", path, where), where + "rewards", path, 1, T)
            term = _check(_field(g, "terminations", path, where), where + "terminations", path, 1, T)
            _check(_field(g, "truncations", path, where), where + "truncations", path, 1, T)
            for key, value in (("obs", obs[:-1]), ("act", act), ("rew", rew), ("nxt", obs[1:]), ("term", term),
                               ("episode", np.full(T, e)), ("t", np.arange(T))):
                parts[key].append(value)
    cat = {k: np.concatenate(v) for k, v in parts.items()}
    return Transitions(cat["obs"].astype(np.float32), cat["act"].astype(np.float32), cat["rew"].astype(np.float32),
                       cat["nxt"].astype(np.float32), cat["term"].astype(np.float32), cat["episode"].astype(np.int64),
                       cat["t"].astype(np.int64))


def load_dataset(path: str | Path) -> Transitions:
    """Either layout, told apart by its top-level keys."""
    import h5py

    path = Path(path)
    if not path.is_file():
        raise OfflineDataError(f"{path}: offline dataset file not found")
    try:
        with h5py.File(path, "r") as f:
            minari = any(k.startswith("episode_") for k in f)
    except OSError as err:
        raise OfflineDataError(f"{path}: not a readable HDF5 file ({err})") from None
    return load_minari(path) if minari else load_d4rl(path)


def write_d4rl(path: str | Path, observations: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
               terminals: np.ndarray, timeouts: np.ndarray) -> Path:
    """Rows in D4RL's layout (one row per step; the step that ends an episode by its time limit
    has timeouts = 1)."""
    import h5py

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:
        for name, value in zip(D4RL_FIELDS, (observations, actions, rewards, terminals, timeouts)):
            f.create_dataset(name, data=value)
    return path


# -- Preference Transformer's label files -----------------------------------------------------------

class _PlainUnpickler(pickle.Unpickler):
    """Numpy arrays, lists and numbers only: a label file never runs code."""

    ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
               ("numpy._core.multiarray", "scalar"), ("numpy.core.numeric", "_frombuffer"),
               ("numpy._core.numeric", "_frombuffer")}

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a label file")
        return super().find_class(module, name)


def _read_pickle(path: Path) -> np.ndarray:
    try:
        value = _PlainUnpickler(io.BytesIO(path.read_bytes())).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as err:
        raise OfflineDataError(f"{path}: not a pickle of plain numbers ({err})") from None
    arr = np.asarray(value)
    if arr.ndim != 1 or arr.dtype.kind not in "iuf" or (arr.dtype.kind == "f" and np.any(arr != np.round(arr))):
        raise OfflineDataError(f"{path}: expected a 1-D list of integers, got shape {arr.shape} dtype {arr.dtype}")
    return arr.astype(np.int64)


def _label_file(folder: Path, prefix: str) -> Path:
    # PT names them indices_num<N>[_q<len>], indices_2_num<N>[_q<len>], label_human
    matches = sorted(p for p in folder.iterdir() if p.name.startswith(prefix))
    if len(matches) != 1:
        raise OfflineDataError(f"{folder}: expected one label file named {prefix}*, found "
                               f"{[p.name for p in matches] or 'none'}")
    return matches[0]


@dataclass
class PreferenceLabels:
    start0: np.ndarray  # [pairs] first segments' starts (transition indices)
    start1: np.ndarray
    y: np.ndarray  # P[σ⁰ ≻ σ¹]: 1, 0, ½


def load_preference_labels(folder: str | Path, data: Transitions, segment: int) -> PreferenceLabels:
    """PT's three label files in `folder` -> starts and targets, checked against `data`: as many
    starts as labels, labels in {0, 1, −1}, every segment inside the dataset."""
    folder = Path(folder)
    if not folder.is_dir():
        raise OfflineDataError(f"{folder}: preference-label folder not found")
    files = {prefix: _label_file(folder, prefix) for prefix in LABEL_FILES}
    i0, i1, lab = (_read_pickle(files[p]) for p in LABEL_FILES)
    for name, arr in (("indices_2_num", i1), ("label_human", lab)):
        if len(arr) != len(i0):
            raise OfflineDataError(f"{files[name]}: {len(arr)} entries, but {files['indices_num']} has {len(i0)}")
    bad = ~np.isin(lab, (0, 1, -1))
    if bad.any():
        raise OfflineDataError(f"{files['label_human']}: label {lab[bad][0]} at pair {int(np.flatnonzero(bad)[0])} "
                               "is not 0 (first preferred), 1 (second) or -1 (equal)")
    for name, arr in (("indices_num", i0), ("indices_2_num", i1)):
        out = (arr < 0) | (arr + segment > len(data))
        if out.any():
            raise OfflineDataError(f"{files[name]}: start {arr[out][0]} at pair {int(np.flatnonzero(out)[0])} leaves "
                                   f"no {segment}-step segment in the dataset's {len(data)} transitions")
    y = np.where(lab == 0, 1.0, np.where(lab == 1, 0.0, 0.5))
    return PreferenceLabels(i0, i1, y)


def write_preference_labels(folder: str | Path, start0: np.ndarray, start1: np.ndarray, y: np.ndarray) -> Path:
    """Targets y = P[σ⁰ ≻ σ¹] (1, 0, ½) in PT's layout: numpy int arrays, labels 0 / 1 / −1."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    n = len(y)
    labels = np.where(y == 1, 0, np.where(y == 0, 1, -1)).astype(np.int64)
    for name, value in ((f"indices_num{n}", start0), (f"indices_2_num{n}", start1), ("label_human", labels)):
        (folder / name).write_bytes(pickle.dumps(np.asarray(value, np.int64)))
    return folder
