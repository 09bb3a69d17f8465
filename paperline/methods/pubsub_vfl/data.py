"""The two parties' data: the spec's tabular sets (scikit-learn's breast cancer and diabetes, a
generated classification set) or a CSV/Parquet table, columns split between the parties."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from paperline.io import DataError
from paperline.methods.pubsub_vfl.config import DataConfig


class VFLDataError(DataError):
    """A table, feature split or id alignment the two parties cannot train on; the message names it."""


@dataclass
class PartyData:
    ids: np.ndarray
    x: np.ndarray


@dataclass
class VFLData:
    task: str
    active_train: PartyData
    passive_train: PartyData
    y_train: np.ndarray
    active_test: PartyData
    passive_test: PartyData
    y_test: np.ndarray
    columns_active: list[str]
    columns_passive: list[str]


def split_columns(columns: list[str], cfg: DataConfig) -> tuple[list[str], list[str]]:
    if cfg.active_columns is not None or cfg.passive_columns is not None:
        active, passive = list(cfg.active_columns or []), list(cfg.passive_columns or [])
        missing = [c for c in active + passive if c not in columns]
        if missing:
            raise VFLDataError(f"feature split: columns {missing} are not in the table ({len(columns)} columns)")
    else:
        n_passive = int(round(len(columns) * cfg.passive_fraction))
        active, passive = columns[: len(columns) - n_passive], columns[len(columns) - n_passive:]
    for name, cols in (("active", active), ("passive", passive)):
        if not cols:
            raise VFLDataError(f"feature split leaves the {name} party with no features "
                               f"(data.{name}_columns / data.passive_fraction={cfg.passive_fraction})")
    return active, passive


def align(active: PartyData, passive: PartyData, where: str) -> None:
    """The PSI step's outcome: both parties hold the same ids in the same order."""
    if len(active.ids) != len(passive.ids) or not np.array_equal(active.ids, passive.ids):
        a, p = set(active.ids.tolist()), set(passive.ids.tolist())
        raise VFLDataError(f"{where}: ids do not align between the parties: {len(a - p)} only at the active "
                           f"party, {len(p - a)} only at the passive party"
                           + ("" if a != p else ", same ids in a different order"))


# the paper's tables (spec c) as their sources ship them: (label column, id column, task)
LAYOUTS = {
    "bank": ("y", None, "classification"),  # UCI bank-full.csv: ';'-separated, y yes/no, text columns
    "credit": ("default payment next month", "ID", "classification"),  # UCI's sheet saved as CSV
    "energy": ("Appliances", None, "regression"),  # UCI energydata_complete.csv: a date column
    "blog": ("target", None, "regression"),  # UCI blogData_train.csv: no header, the target last
}


def _read_layout(path: Path, layout: str):
    """The table as pandas reads it, then shaped as the layout says: Bank's text columns one-hot
    and its label 0/1, Credit's second header row (the sheet's first row is X1 … Y), Energy's date
    column dropped, Blog's columns named."""
    import pandas as pd

    if path.suffix == ".parquet":
        return pd.read_parquet(path)
    if layout == "bank":
        frame = pd.read_csv(path, sep=";")
        if "y" in frame:
            frame["y"] = frame["y"].map({"yes": 1.0, "no": 0.0, 1: 1.0, 0: 0.0})
        text = [c for c in frame.columns if c != "y" and not pd.api.types.is_numeric_dtype(frame[c])]
        return pd.get_dummies(frame, columns=text, dtype=float)
    if layout == "credit":
        header = pd.read_csv(path, nrows=0).columns  # the first row only: which of the two headers
        return pd.read_csv(path, header=1 if "ID" not in header and "X1" in header else 0)
    if layout == "energy":
        return pd.read_csv(path).drop(columns=["date"], errors="ignore")
    if layout == "blog":
        frame = pd.read_csv(path, header=None)
        return frame.set_axis([f"f{i}" for i in range(frame.shape[1] - 1)] + ["target"], axis=1)
    return pd.read_csv(path)


def read_table(path: Path, label_column: str, id_column: str | None, layout: str = "table"
               ) -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray]:
    """Features, labels, feature names and ids of a CSV or Parquet table (or one of the paper's, by
    its layout); a file that is not one, a missing column or a non-numeric value is a
    VFLDataError naming the file (and pandas' row)."""
    import pandas as pd

    if not path.is_file():
        raise VFLDataError(f"data.path: {path} is not a file")
    try:
        frame = _read_layout(path, layout)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError, OSError) as err:
        kind = "Parquet" if path.suffix == ".parquet" else "CSV"
        raise VFLDataError(f"{path}: not a readable {kind} table ({str(err).strip().splitlines()[0]})") from err
    for role, column in (("label", label_column), ("id", id_column)):
        if column is not None and column not in frame:
            raise VFLDataError(f"{path}: no {role} column {column!r} (columns: {list(frame.columns)[:10]})")
    features = [c for c in frame.columns if c not in (label_column, id_column)]
    if not features:
        raise VFLDataError(f"{path}: no feature columns beside {label_column!r}")
    for column in [*features, label_column]:
        bad = pd.to_numeric(frame[column], errors="coerce").isna()  # text, or an empty cell
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            value = frame[column].iloc[row]
            held = "an empty cell" if pd.isna(value) else repr(value)
            raise VFLDataError(f"{path}: line {row + 2}: column {column!r} holds {held}, not a number")  # line 1: header
    ids = frame[id_column].to_numpy() if id_column else np.arange(len(frame))
    return frame[features].to_numpy(float), frame[label_column].to_numpy(float), features, ids


def _layout(cfg: DataConfig) -> tuple[str, str | None, str]:
    """A file's (label column, id column, task): its layout's for the paper's tables, else as configured."""
    return LAYOUTS.get(cfg.layout, (cfg.label_column, cfg.id_column, cfg.task))


def _table(cfg: DataConfig) -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray]:
    if cfg.name == "file":
        label, id_column, _ = _layout(cfg)
        return read_table(Path(cfg.path or ""), label, id_column, cfg.layout)
    from sklearn import datasets

    if cfg.name == "synthetic":
        x, y = datasets.make_classification(n_samples=cfg.n_samples, n_features=cfg.n_features,
                                            n_informative=max(2, cfg.n_features // 2), n_redundant=0,
                                            random_state=cfg.seed)
    else:
        x, y = (datasets.load_breast_cancer if cfg.name == "breast_cancer" else datasets.load_diabetes)(return_X_y=True)
    return x, y.astype(float), [f"f{i}" for i in range(x.shape[1])], np.arange(len(x))


def task_of(cfg: DataConfig) -> str:
    if cfg.name == "file":
        return _layout(cfg)[2]
    return {"synthetic": "classification", "breast_cancer": "classification", "diabetes": "regression"}[cfg.name]


def load(cfg: DataConfig) -> VFLData:
    """Standardised features (train statistics), a seeded 70/30 split; y standardised for regression."""
    x, y, columns, ids = _table(cfg)
    active_cols, passive_cols = split_columns(columns, cfg)
    index = {c: i for i, c in enumerate(columns)}
    rng = np.random.default_rng(cfg.seed)
    order = rng.permutation(len(x))
    n_test = int(round(len(x) * cfg.test_fraction))
    test, train = order[:n_test], order[n_test:]
    mean, std = x[train].mean(0), x[train].std(0) + 1e-8
    x = (x - mean) / std
    task = task_of(cfg)
    if task == "regression":
        y = (y - y[train].mean()) / (y[train].std() + 1e-8)

    def party(cols, rows):
        return PartyData(ids[rows], x[np.ix_(rows, [index[c] for c in cols])])

    return VFLData(task, party(active_cols, train), party(passive_cols, train), y[train],
                   party(active_cols, test), party(passive_cols, test), y[test], active_cols, passive_cols)
