"""The parties' data: the built-in sets split by columns, a CSV and a Parquet table split by
column names, and bad input refused with an error naming it."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from paperline.methods.pubsub_vfl.config import DataConfig, PubSubVFLConfig
from paperline.methods.pubsub_vfl.data import PartyData, VFLDataError, align, load
from paperline.methods.pubsub_vfl.train import run_variant


def test_builtin_sets_are_split_between_the_parties():
    data = load(DataConfig(name="breast_cancer", passive_fraction=0.6))
    assert data.active_train.x.shape[1] + data.passive_train.x.shape[1] == 30
    assert data.passive_train.x.shape[1] == 18 and set(data.columns_active).isdisjoint(data.columns_passive)
    assert len(data.y_test) == round(569 * 0.3) and data.task == "classification"
    assert load(DataConfig(name="diabetes")).task == "regression"


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_table_by_path_with_its_columns_by_name(tmp_path, suffix):
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"id": np.arange(50), "a1": rng.normal(size=50), "a2": rng.normal(size=50),
                          "p1": rng.normal(size=50), "label": rng.normal(size=50)})
    path = tmp_path / f"energy{suffix}"
    frame.to_csv(path, index=False) if suffix == ".csv" else frame.to_parquet(path)
    data = load(DataConfig(name="file", path=str(path), id_column="id", label_column="label", task="regression",
                           active_columns=["a1", "a2"], passive_columns=["p1"]))
    assert data.columns_active == ["a1", "a2"] and data.columns_passive == ["p1"]
    assert data.passive_train.x.shape == (35, 1) and np.array_equal(data.active_train.ids, data.passive_train.ids)


def test_a_split_that_leaves_a_party_empty_is_refused(tmp_path):
    path = tmp_path / "t.csv"
    pd.DataFrame({"a": [1.0, 2.0], "y": [0, 1]}).to_csv(path, index=False)
    with pytest.raises(VFLDataError, match="leaves the passive party with no features"):
        load(DataConfig(name="file", path=str(path), active_columns=["a"], passive_columns=[]))
    with pytest.raises(VFLDataError, match=r"columns \['b'\] are not in the table"):
        load(DataConfig(name="file", path=str(path), active_columns=["a"], passive_columns=["b"]))
    with pytest.raises(VFLDataError, match="no features"):
        load(DataConfig(name="synthetic", n_samples=40, n_features=2, passive_fraction=0.9))


def test_ids_that_do_not_align_are_refused_before_any_process_starts():
    with pytest.raises(VFLDataError, match="ids do not align between the parties: 1 only at the active party"):
        align(PartyData(np.array([1, 2, 3]), np.zeros((3, 1))), PartyData(np.array([1, 2, 4]), np.zeros((3, 1))), "x")
    with pytest.raises(VFLDataError, match="same ids in a different order"):
        align(PartyData(np.array([1, 2]), np.zeros((2, 1))), PartyData(np.array([2, 1]), np.zeros((2, 1))), "x")
    data = load(DataConfig(name="breast_cancer"))
    data.passive_train.ids = data.passive_train.ids[::-1].copy()
    with pytest.raises(VFLDataError, match="train split: ids do not align"):
        run_variant(PubSubVFLConfig(), data, "vfl", 0)


@pytest.mark.parametrize("content, message", [
    (b'a,b,y\n1,2,0\n"3,4,1\n5,6,0\n', r"bad\.csv: not a readable CSV table \(.*EOF inside string"),  # truncated quote
    (b"", r"bad\.csv: not a readable CSV table"),  # empty
    (b"a,b,label\n1,2,0\n", r"bad\.csv: no label column 'y'"),  # wrongly shaped: no label column
    (b"a,b,y\n1,2,0\n3,four,1\n", r"bad\.csv: line 3: column 'b' holds 'four', not a number"),
    (b"a,b,y\n1,2,0\n3,,1\n", r"bad\.csv: line 3: column 'b' holds an empty cell, not a number"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10\xff\xfe", r"bad\.csv: not a readable CSV table"),  # wrong type
])
def test_a_table_that_cannot_be_trained_on_is_named_with_its_file_and_line(tmp_path, content, message):
    path = tmp_path / "bad.csv"
    path.write_bytes(content)
    with pytest.raises(VFLDataError, match=message):
        load(DataConfig(name="file", path=str(path), label_column="y", task="classification"))


def _write_paper_file(tmp_path, layout: str, rng):
    """A few rows shaped as the paper's source file of `layout` ships."""
    n = 40
    if layout == "bank":
        frame = pd.DataFrame({"age": rng.integers(20, 70, n), "job": rng.choice(["admin.", "services"], n),
                              "balance": rng.normal(size=n), "loan": rng.choice(["yes", "no"], n),
                              "y": np.where(np.arange(n) % 2, "yes", "no")})
        path = tmp_path / "bank-full.csv"
        frame.to_csv(path, sep=";", index=False)
    elif layout == "credit":  # the sheet's two header rows: X1 … Y, then the names
        path = tmp_path / "credit.csv"
        names = ["ID", "LIMIT_BAL", "AGE", "PAY_0", "default payment next month"]
        rows = [[i + 1, rng.integers(1, 9) * 1e4, rng.integers(20, 70), rng.integers(-2, 3), i % 2] for i in range(n)]
        path.write_text("\n".join([",X1,X2,X3,Y", ",".join(names)] + [",".join(map(str, r)) for r in rows]) + "\n")
    elif layout == "energy":
        frame = pd.DataFrame({"date": pd.date_range("2016-01-11", periods=n, freq="10min").astype(str),
                              "Appliances": rng.normal(100, 10, n), "T1": rng.normal(size=n),
                              "RH_1": rng.normal(size=n), "rv1": rng.normal(size=n)})
        path = tmp_path / "energydata_complete.csv"
        frame.to_csv(path, index=False)
    else:  # blog: no header, the target last
        path = tmp_path / "blogData_train.csv"
        pd.DataFrame(rng.normal(size=(n, 6))).to_csv(path, header=False, index=False)
    return path


@pytest.mark.parametrize("layout, n_features, task", [("bank", 6, "classification"), ("credit", 3, "classification"),
                                                      ("energy", 3, "regression"), ("blog", 5, "regression")])
def test_the_papers_tables_load_as_their_sources_ship_them(tmp_path, layout, n_features, task):
    rng = np.random.default_rng(1)
    path = _write_paper_file(tmp_path, layout, rng)
    data = load(DataConfig(name="file", layout=layout, path=str(path), passive_fraction=0.5))
    assert data.task == task and len(data.y_train) + len(data.y_test) == 40
    assert len(data.columns_active) + len(data.columns_passive) == n_features  # no label, id or date among them
    if layout == "bank":  # yes/no as 1/0, the text columns one-hot
        assert set(data.y_train) | set(data.y_test) == {0.0, 1.0} and "job_services" in data.columns_active + data.columns_passive
    if layout == "credit":  # the ids read from the ID column
        assert set(data.active_train.ids) | set(data.active_test.ids) == set(range(1, 41))


def test_the_paper_profile_reads_the_bank_file_by_path():
    from paperline.config import load_method_config, read_params

    params = Path(__file__).resolve().parents[2] / "params"
    _, cfg = load_method_config(PubSubVFLConfig, read_params(params), "pubsub_vfl", "paper", [], source=str(params))
    assert (cfg.data.name, cfg.data.layout, cfg.bottom_layers) == ("file", "bank", 10)
