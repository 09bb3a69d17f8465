"""The GeoAda flow and its nbody stage: their outputs in the tiny DAG (the data record, metrics with
a row per control type × variant and the claims, the report's rows, MLflow runs with a row and a
loss curve each, plots, checkpoints), and the refused inputs (a NaN, a wrong shape, trajectories
shorter than the window, a missing split) failing before any run starts, naming the file and field."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import yaml

from paperline.data.nbody import NBodyError
from paperline.methods.geoada.config import VARIANTS, GeoAdaConfig, fits
from paperline.metrics import validate_metrics
from tasks import track
from tests.conftest import finished_flow_runs, report_rows

CONTROLS = ("frame", "global", "subgraph")
ROWS = [f"{c}_{v}" for c in CONTROLS for v in VARIANTS if fits(v, c)]


def test_tiny_dag_outputs(dag):
    record = json.loads((dag / "data" / "nbody" / "nbody.json").read_text())
    assert record["source"] == "simulate" and record["trajectories"]["train_charged5"] == 40
    path = dag / "metrics" / "geoada.json"
    metrics = validate_metrics(json.loads(path.read_text()), str(path))
    assert list(metrics.rows) == ROWS and metrics.profile == "tiny" and metrics.primary_metric == "ade"
    base = metrics.headline["base_original_ade"]
    for name, row in metrics.rows.items():
        for key in ("ade", "fde", "min_ade", "min_fde", "original_ade"):
            assert row[key] > 0, (name, key)
        assert row["min_ade"] <= row["ade"] and row["min_fde"] <= row["fde"]
        if row["variant"] in ("frozen", "geoada", "controlnet"):  # the base on the original task
            assert row["original_is_base"] and row["original_ade"] == base and row["original_ade_change"] == 0
        if row["variant"] == "frozen":
            assert row["trainable_params"] == 0
        else:
            assert row["trainable_params"] > 0 and row["train_seconds"] > 0
    h = metrics.headline
    assert h["geoada_equivariance_error"] < 1e-10 < h["controlnet_equivariance_error"]  # float64 probe
    for key in ("claim_geoada_matches_full_ft", "claim_geoada_no_forgetting", "claim_full_ft_forgets",
                "claim_geoada_equivariant",
                *(f"claim_{c}_{k}" for c in CONTROLS
                  for k in ("geoada_matches_full_ft", "geoada_no_forgetting", "full_ft_forgets"))):
        assert isinstance(h[key], bool), key
    assert "prompt_template" not in {r["variant"] for r in metrics.rows.values() if r["control"] == "global"}
    assert h["claim_geoada_no_forgetting"] and h["claim_geoada_equivariant"]
    assert report_rows(dag, "geoada") == ROWS

    parent, children = finished_flow_runs(dag, "geoada")
    assert [d.dataset.digest for d in parent.inputs.dataset_inputs] != ["generated"]  # versioned by content
    assert sorted(r.data.tags["variant"] for r in children) == sorted(["base", *ROWS])
    c = track.client()
    steps = yaml.safe_load((dag / "params.yaml").read_text())["geoada"]["profiles"]["tiny"]["finetune"]["steps"]
    for child in children:
        assert child.info.status == "FINISHED"
        name = child.data.tags["variant"]
        if name == "base":
            assert "original_ade" in child.data.metrics
            continue
        assert child.data.metrics["ade"] == pytest.approx(metrics.rows[name]["ade"])
        if not name.endswith("frozen"):
            assert c.get_metric_history(child.info.run_id, "loss")[-1].step == steps
    assert sorted(p.name for p in (dag / "plots" / "geoada").glob("*.png")) == ["ade.png", "finetune_loss.png"]
    assert (dag / "plots" / "geoada" / "ade.csv").read_text().startswith("row,ade,fde")
    assert json.loads((dag / "models" / "geoada" / "run.json").read_text())["complete"]
    assert (dag / "models" / "geoada" / "base.pt").is_file()
    assert (dag / "models" / "geoada" / "frame_geoada" / "train.pt").is_file()


@pytest.mark.dag_stage("geoada")
def test_refused_inputs_name_the_file_and_field(dag_stage, tmp_path):
    from tasks import geoada, nbody_prep

    params = yaml.safe_load((dag_stage / "params.yaml").read_text())
    _, data_cfg = nbody_prep.resolve(params, "tiny")
    folder = tmp_path / "nbody"
    shutil.copytree(dag_stage / "data" / "nbody", folder)
    data_cfg = data_cfg.model_copy(update={"out": str(folder)})
    cfg = GeoAdaConfig(**params["geoada"]["profiles"]["tiny"])
    assert geoada.data(cfg, data_cfg).folder == str(folder)  # the copy is accepted as it is

    loc = folder / "loc_test_charged5.npy"
    good = np.load(loc)
    bad = good.copy()
    bad[0, 1, 2, 3] = np.inf
    np.save(loc, bad)
    with pytest.raises(NBodyError, match=r"loc_test_charged5\.npy: loc: non-finite value \(NaN or inf\) at index \(0, 1, 2, 3\)"):
        geoada.data(cfg, data_cfg)
    vel = folder / "vel_test_charged5.npy"
    good_vel = np.load(vel)
    np.save(loc, good[:, :3])
    np.save(vel, good_vel[:, :3])
    with pytest.raises(NBodyError, match=r"loc_test_charged5\.npy: loc: trajectories of 3 frames, shorter than the 6"):
        geoada.data(cfg, data_cfg)
    np.save(loc, good)
    np.save(vel, good_vel)
    (folder / "strength_train_charged5_strength.npy").unlink()
    with pytest.raises(NBodyError, match=r"strength_train_charged5_strength\.npy: missing"):
        geoada.data(cfg, data_cfg)
    assert geoada.data(cfg.model_copy(update={"controls": ["frame"]}), data_cfg).folder == str(folder)
