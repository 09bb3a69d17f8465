"""The GeoAda flow and its nbody stage: their outputs in the tiny DAG (the data record, metrics with
a row per control type × variant, each the mean over the tiny profile's two seeds, and the claims,
the report's rows, MLflow runs with a row each and a run per seed with a loss curve, plots,
checkpoints), and the refused inputs (a NaN, a wrong shape, trajectories
shorter than the window, a missing split) failing before any run starts, naming the file and field."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import yaml

from paperline.config import read_params
from paperline.data.nbody import NBodyError
from paperline.methods.geoada.claims import SPECS
from paperline.methods.geoada.config import GeoAdaConfig, fits
from paperline.metrics import validate_metrics
from tasks import track
from tests.conftest import finished_flow_runs, report_rows

CONTROLS = ("frame", "global", "subgraph")
TINY_VARIANTS = ("frozen", "full_ft", "controlnet", "geoada")  # params/geoada.yaml geoada.profiles.tiny
SEEDS = (0, 1)
ROWS = [f"{c}_{v}" for c in CONTROLS for v in TINY_VARIANTS if fits(v, c)]


def test_tiny_dag_outputs(dag):
    record = json.loads((dag / "data" / "nbody" / "nbody.json").read_text())
    assert record["source"] == "simulate" and record["trajectories"]["train_charged5"] == 40
    path = dag / "results" / "geoada.json"
    metrics = validate_metrics(json.loads(path.read_text()), str(path))
    assert list(metrics.rows) == ROWS and metrics.profile == "tiny" and metrics.primary_metric == "ade"
    base_by_seed = {s: metrics.tables["seeds"][f"frame_frozen seed{s}"]["original_ade"] for s in SEEDS}
    for name, row in metrics.rows.items():
        assert row["seeds"] == len(SEEDS)
        for key in ("ade", "fde", "min_ade", "min_fde", "original_ade"):
            assert row[key] > 0, (name, key)
        assert row["min_ade"] <= row["ade"] and row["min_fde"] <= row["fde"]
        assert row["ade"] == pytest.approx(sum(metrics.tables["seeds"][f"{name} seed{s}"]["ade"] for s in SEEDS) / 2)
        if row["variant"] != "full_ft":  # its additions off, the variant on the original task is the base
            assert row["original_is_base"] and row["original_ade_change"] == 0
            for s in SEEDS:
                assert metrics.tables["seeds"][f"{name} seed{s}"]["original_ade"] == base_by_seed[s]
        # additions on: the adapter's control stream reads the original input (scored apart from "off")
        assert (row["original_on_ade"] != row["original_ade"]) == (row["variant"] in ("geoada", "controlnet")), name
        if row["variant"] == "frozen":
            assert row["trainable_params"] == 0
        else:
            assert row["trainable_params"] > 0 and row["train_seconds"] > 0
    assert base_by_seed[0] != base_by_seed[1]  # the seeds' sampling noise differs
    # every fine-tuned row's rate from the first seed's sweep, the other seed at that rate
    sweeps = metrics.details["lr_sweep"]
    assert set(sweeps) == {name for name in ROWS if not name.endswith("_frozen")}
    for name, sweep in sweeps.items():
        assert set(sweep["validation_loss"]) == {"0.001", "0.003"}
        best = min(sweep["validation_loss"], key=sweep["validation_loss"].get)
        assert metrics.rows[name]["lr"] == sweep["chosen"] == float(best)
        for s in SEEDS:
            assert metrics.tables["seeds"][f"{name} seed{s}"]["lr"] == sweep["chosen"]
    h = metrics.headline
    assert not any("claim" in k for k in h)
    assert h["geoada_equivariance_error"] < 1e-10 < h["controlnet_equivariance_error"]  # float64 probe
    names = {c.name for c in metrics.claims}
    assert names <= {s.name for s in SPECS} and any(c.trivial for c in metrics.claims)
    assert names == {s.name for s in SPECS}  # tiny runs every control and the claims' variants
    by_name = {c.name: c for c in metrics.claims}
    assert by_name["geoada_equivariant"].verdict == "exact"
    assert all(c.seeds == len(SEEDS) and c.verdict == "inconclusive" for c in metrics.claims if c.kind == "paired")
    assert report_rows(dag, "geoada") == ROWS

    parent, children = finished_flow_runs(dag, "geoada")
    assert [d.dataset.digest for d in parent.inputs.dataset_inputs] != ["generated"]  # versioned by content
    assert sorted(r.data.tags["variant"] for r in children) == sorted(["base", *ROWS])
    c = track.client()
    steps = yaml.safe_load((dag / "params" / "geoada.yaml").read_text())["geoada"]["profiles"]["tiny"]["finetune"]["steps"]
    for child in children:
        assert child.info.status == "FINISHED"
        name = child.data.tags["variant"]
        if name == "base":
            assert "original_ade" in child.data.metrics and "seed1/original_ade" in child.data.metrics
            continue
        assert child.data.metrics["ade"] == pytest.approx(metrics.rows[name]["ade"])  # the row, mean over seeds
        seed_runs = c.search_runs([child.info.experiment_id],
                                  filter_string=f"tags.mlflow.parentRunId = '{child.info.run_id}'")
        assert sorted(r.data.tags["variant"] for r in seed_runs) == [f"{name}/seed{s}" for s in SEEDS]
        for seed_run in seed_runs:
            s = int(seed_run.data.tags["variant"].rsplit("seed", 1)[1])
            assert seed_run.data.metrics["ade"] == pytest.approx(metrics.tables["seeds"][f"{name} seed{s}"]["ade"])
            if not name.endswith("frozen"):
                assert c.get_metric_history(seed_run.info.run_id, "loss")[-1].step == steps
    assert sorted(p.name for p in (dag / "plots" / "geoada").glob("*.png")) == ["ade.png", "finetune_loss.png"]
    assert (dag / "plots" / "geoada" / "ade.csv").read_text().startswith("row,ade,fde")
    assert json.loads((dag / "models" / "geoada" / "run.json").read_text())["complete"]
    assert (dag / "models" / "geoada" / "base.pt").is_file()
    frame = dag / "models" / "geoada" / "frame_geoada"  # the first seed sweeps the rates: a checkpoint a rate
    assert sorted(p.parent.name for p in (frame / f"seed{SEEDS[0]}").glob("lr*/train.pt")) == ["lr0.001", "lr0.003"]
    assert all((frame / f"seed{s}" / "train.pt").is_file() for s in SEEDS[1:])


@pytest.mark.dag_stage("geoada")
def test_refused_inputs_name_the_file_and_field(dag_stage, tmp_path):
    from tasks import geoada, nbody_prep

    params = read_params(dag_stage / "params")
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
    with pytest.raises(NBodyError, match=r"geoada dataset 'md17': nbody source 'simulate' holds charged only"):
        geoada.data(cfg.model_copy(update={"dataset": "md17", "controls": ["frame"]}), data_cfg)
