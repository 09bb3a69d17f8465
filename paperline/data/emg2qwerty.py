"""emg2qwerty session files: reader, writer, charset, keystroke windows and user splits.

Layout (spec §b, "Data format"): one HDF5 file per session; group `emg2qwerty` holds the
compound dataset `timeseries` with fields `time` (unix seconds, T), `emg_left` (T×16) and
`emg_right` (T×16), already high-pass filtered. Group attributes: `session_name`, `user`,
`condition`, `duration_mins`, and the JSON strings `keystrokes` (list of {"key", "start", "end"},
pynput key names such as "a" or "Key.space") and `prompts` (list of {"name": "text_prompt",
"start", "end", "payload": {"text"}}).

Every malformed file fails with a `SessionFormatError` that names the file and the field.
"""
from __future__ import annotations

import json
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from paperline.io import DataError, atomic_path

GROUP = "emg2qwerty"
DATASET = "timeseries"
SAMPLE_RATE = 2000.0
ELECTRODES = 16
HANDS = ("emg_left", "emg_right")
REQUIRED_ATTRIBUTES = ("session_name", "user", "condition", "duration_mins", "keystrokes", "prompts")

# Charset (spec): 94 printable ASCII + backspace, enter, space, shift = 98 classes; blank = 98.
PRINTABLE = [c for c in string.printable if c not in string.whitespace]  # 94 chars, '!'..'~'
SPECIAL_KEYS = {"Key.backspace": "⌫", "Key.enter": "⏎", "Key.space": " ", "Key.shift": "⇧",
                "Key.shift_l": "⇧", "Key.shift_r": "⇧"}
CHARSET: list[str] = PRINTABLE + ["⌫", "⏎", " ", "⇧"]
NUM_CLASSES = len(CHARSET)  # 98
BLANK = NUM_CLASSES  # the CTC blank: index 98, so a model has 99 outputs
CHAR_TO_LABEL = {c: i for i, c in enumerate(CHARSET)}
CHAR_TO_KEY = {c: c for c in PRINTABLE} | {"⌫": "Key.backspace", "⏎": "Key.enter", " ": "Key.space",
                                          "⇧": "Key.shift"}
assert NUM_CLASSES == 98 and len(PRINTABLE) == 94


class SessionFormatError(DataError):
    """A session file does not follow the emg2qwerty layout; the message names file and field."""


def key_to_char(key: str) -> str | None:
    """The charset character of a pynput key name, or None for keys outside the charset
    (emg2qwerty drops those: arrows, ctrl, ...)."""
    if key in SPECIAL_KEYS:
        return SPECIAL_KEYS[key]
    if len(key) == 1 and key in CHAR_TO_LABEL:
        return key
    return None


def labels_of_text(text: str) -> list[int]:
    return [CHAR_TO_LABEL[c] for c in text if c in CHAR_TO_LABEL]


def text_of_labels(labels: Iterable[int]) -> str:
    return "".join(CHARSET[int(i)] for i in labels)


@dataclass
class Session:
    """One session in memory. `emg` is (T, 2, 16) float32: hand 0 left, hand 1 right."""

    user: str
    session_name: str
    time: np.ndarray
    emg: np.ndarray
    keystrokes: list[dict[str, Any]]
    prompts: list[dict[str, Any]] = field(default_factory=list)
    condition: str = "on_keyboard"

    @property
    def duration_mins(self) -> float:
        return float(self.time[-1] - self.time[0]) / 60.0 if len(self.time) else 0.0

    def key_labels(self, t_start: float = -np.inf, t_end: float = np.inf) -> list[int]:
        """Labels of the keystrokes whose press time falls in [t_start, t_end) (spec: padding excluded)."""
        out = []
        for k in self.keystrokes:
            if t_start <= k["start"] < t_end:
                char = key_to_char(k["key"])
                if char is not None:
                    out.append(CHAR_TO_LABEL[char])
        return out


def write_session(path: str | Path, session: Session) -> Path:
    """Write `session` in the emg2qwerty layout (atomically)."""
    import h5py

    path = Path(path)
    dtype = np.dtype([("time", "<f8"), ("emg_left", "<f4", (ELECTRODES,)), ("emg_right", "<f4", (ELECTRODES,))])
    table = np.empty(len(session.time), dtype=dtype)
    table["time"] = session.time
    table["emg_left"] = session.emg[:, 0]
    table["emg_right"] = session.emg[:, 1]
    with atomic_path(path) as tmp:
        with h5py.File(tmp, "w") as f:
            group = f.create_group(GROUP)
            group.create_dataset(DATASET, data=table)
            group.attrs["session_name"] = session.session_name
            group.attrs["user"] = session.user
            group.attrs["condition"] = session.condition
            group.attrs["duration_mins"] = session.duration_mins
            group.attrs["keystrokes"] = json.dumps(session.keystrokes)
            group.attrs["prompts"] = json.dumps(session.prompts)
    return path


def _attr(group, name: str, path: Path) -> Any:
    if name not in group.attrs:
        raise SessionFormatError(f"{path}: {GROUP}.attrs[{name!r}]: missing attribute")
    value = group.attrs[name]
    return value.decode() if isinstance(value, bytes) else value


def _json_list(group, name: str, path: Path, keys: Sequence[str]) -> list[dict[str, Any]]:
    raw = _attr(group, name, path)
    try:
        items = json.loads(raw)
    except (TypeError, json.JSONDecodeError) as err:
        raise SessionFormatError(f"{path}: {GROUP}.attrs[{name!r}]: not a JSON string ({err})") from None
    if not isinstance(items, list):
        raise SessionFormatError(f"{path}: {GROUP}.attrs[{name!r}]: expected a JSON list")
    for i, item in enumerate(items):
        missing = [k for k in keys if not isinstance(item, dict) or k not in item]
        if missing:
            raise SessionFormatError(f"{path}: {GROUP}.attrs[{name!r}][{i}]: missing {missing[0]!r}")
    return items


def read_attributes(path: str | Path) -> dict[str, Any]:
    """user, session_name, condition of a session without reading its signal."""
    import h5py

    path = Path(path)
    with _open(path, h5py) as f:
        group = _group(f, path)
        _check_layout(group, path)  # a folder of sessions is checked file by file before any is read
        return {name: _attr(group, name, path) for name in ("user", "session_name", "condition")}


def _open(path: Path, h5py):
    if not path.is_file():
        raise SessionFormatError(f"{path}: no such session file")
    try:
        return h5py.File(path, "r")
    except OSError as err:
        raise SessionFormatError(f"{path}: not an HDF5 file ({err})") from None


def _group(f, path: Path):
    if GROUP not in f:
        raise SessionFormatError(f"{path}: {GROUP}: missing group")
    return f[GROUP]


def _check_layout(group, path: Path) -> None:
    """The table's fields and channels, from its dtype alone (no sample is read)."""
    if DATASET not in group:
        raise SessionFormatError(f"{path}: {GROUP}/{DATASET}: missing dataset")
    dtype = group[DATASET].dtype
    names = dtype.names or ()
    for name in ("time", *HANDS):
        if name not in names:
            raise SessionFormatError(f"{path}: {GROUP}/{DATASET}.{name}: missing field "
                                     f"(fields: {', '.join(names) or 'none'})")
    for name in HANDS:
        if dtype[name].shape != (ELECTRODES,):
            raise SessionFormatError(f"{path}: {GROUP}/{DATASET}.{name}: expected {ELECTRODES} channels "
                                     f"per sample, got shape {dtype[name].shape}")


def read_session(path: str | Path) -> Session:
    """Read and validate one session file."""
    import h5py

    path = Path(path)
    with _open(path, h5py) as f:
        group = _group(f, path)
        _check_layout(group, path)
        try:
            table = group[DATASET][()]
        except OSError as err:  # a header that opens over a table cut short
            raise SessionFormatError(f"{path}: {GROUP}/{DATASET}: unreadable ({err})") from None
        attrs = {name: _attr(group, name, path) for name in REQUIRED_ATTRIBUTES}
        keystrokes = _json_list(group, "keystrokes", path, ("key", "start", "end"))
        prompts = _json_list(group, "prompts", path, ("start", "end"))
    time = np.asarray(table["time"], dtype=np.float64)
    hands = []
    for name in HANDS:
        emg = np.asarray(table[name])
        bad = ~np.isfinite(emg)
        if bad.any():
            row, col = np.argwhere(bad)[0]
            raise SessionFormatError(f"{path}: {GROUP}/{DATASET}.{name}: non-finite value (NaN/inf) at "
                                     f"sample {row}, electrode {col}")
        hands.append(emg.astype(np.float32))
    if not np.isfinite(time).all():
        raise SessionFormatError(f"{path}: {GROUP}/{DATASET}.time: non-finite timestamp at sample "
                                 f"{int(np.argmin(np.isfinite(time)))}")
    steps = np.diff(time)
    if (steps <= 0).any():
        i = int(np.argmax(steps <= 0))
        raise SessionFormatError(f"{path}: {GROUP}/{DATASET}.time: timestamps out of order at sample {i + 1} "
                                 f"({time[i + 1]!r} after {time[i]!r})")
    return Session(user=str(attrs["user"]), session_name=str(attrs["session_name"]), time=time,
                   emg=np.stack(hands, axis=1), keystrokes=keystrokes, prompts=prompts,
                   condition=str(attrs["condition"]))


# ---- windows -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """Samples [start - left_padding, stop + right_padding) go in; labels are the keystrokes pressed
    in [start, stop)."""

    start: int
    stop: int
    left_padding: int
    right_padding: int


def training_windows(num_samples: int, window: int, left_padding: int, right_padding: int,
                     offset: int = 0) -> list[Window]:
    """Consecutive windows of `window` samples (stride = window, as emg2qwerty's WindowedEMGDataset),
    starting at `offset` (the random jitter), each with its padding inside the session."""
    out = []
    start = left_padding + offset
    while start + window + right_padding <= num_samples:
        out.append(Window(start, start + window, left_padding, right_padding))
        start += window
    return out


# ---- sessions and splits -------------------------------------------------------------------------


@dataclass(frozen=True)
class SessionRef:
    path: str
    user: str
    session_name: str


def scan_sessions(directory: str | Path, condition: str = "on_keyboard") -> list[SessionRef]:
    """Every *.hdf5 session under `directory` with the given condition, sorted by (user, name)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise SessionFormatError(f"{directory}: no such folder of emg2qwerty sessions")
    refs = []
    for path in sorted(directory.rglob("*.hdf5")):
        attrs = read_attributes(path)
        if attrs["condition"] == condition:
            refs.append(SessionRef(str(path), str(attrs["user"]), str(attrs["session_name"])))
    if not refs:
        raise SessionFormatError(f"{directory}: no {condition!r} *.hdf5 sessions")
    return sorted(refs, key=lambda r: (r.user, r.session_name))


@dataclass(frozen=True)
class Split:
    """The generic split (train/val users) and, per held-out user, fine-tune and test sessions."""

    train: list[SessionRef]
    val: list[SessionRef]
    finetune: dict[str, list[SessionRef]]
    test: dict[str, list[SessionRef]]


def user_split(refs: Sequence[SessionRef], test_users: int, val_users: int = 0,
               test_sessions_per_user: int = 1) -> Split:
    """Users sorted by name: the last `test_users` are held out (emg2qwerty: 8 test users; each
    contributes its last sessions as test and the others for personalisation), the `val_users`
    before them validate the generic model (SplashNet: the excluded `otheruser` sessions), the rest
    train. Reconstruction: the real split files list sessions by id; this rule only orders users."""
    users = sorted({r.user for r in refs})
    if len(users) < test_users + val_users + 1:
        raise ValueError(f"{len(users)} users cannot give {test_users} test and {val_users} validation users "
                         "and at least one training user")
    test_names = users[len(users) - test_users:]
    val_names = users[len(users) - test_users - val_users:len(users) - test_users]
    by_user = {u: [r for r in refs if r.user == u] for u in users}
    finetune, test = {}, {}
    for u in test_names:
        sessions = by_user[u]
        if len(sessions) <= test_sessions_per_user:
            raise ValueError(f"user {u}: {len(sessions)} sessions; needs more than "
                             f"{test_sessions_per_user} (test) to leave sessions for fine-tuning")
        finetune[u] = sessions[:-test_sessions_per_user]
        test[u] = sessions[-test_sessions_per_user:]
    train = [r for u in users if u not in test_names and u not in val_names for r in by_user[u]]
    val = [r for u in val_names for r in by_user[u]]
    return Split(train=train, val=val, finetune=finetune, test=test)
