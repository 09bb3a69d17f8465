"""The ZTSurv pipeline end to end at the tiny profile: the three WSI prep flows as DVC runs them,
then the flow: metrics, plots, MLflow runs per method and fold, checkpoints; and parameter errors."""
from __future__ import annotations

import json

import pytest
import yaml

from flows.__main__ import main as flows_cli
from flows.launch import run_method
from paperline.config import ParamsError, read_params
from tasks import track, wsi_prep

METHODS = ["composition_cox", "mean_pool", "abmil", "gcn", "ztsurv"]


def test_tiny_prep_stages_then_flow(project, prefect_server):
    for stage in ("wsi-cohort", "wsi-downsample", "til-maps"):
        assert flows_cli(["run", stage, "--profile", "tiny"]) == 0
    index = json.loads((project / "data" / "wsi" / "thumbnails" / "index.json").read_text())
    assert len(index["slides"]) == 16 and index["failed"] == []

    run_method("ztsurv", "tiny")
    metrics = json.loads((project / "metrics" / "ztsurv.json").read_text())
    for m in METHODS:
        row = metrics[m]
        assert 0 <= row["c_index_mean"] <= 1 and 0 <= row["c_index_oof"] <= 1 and row["c_index_std"] >= 0
    assert metrics["patients"] == 16 and metrics["failed_slides"] == 0
    assert metrics["gain_over_best_pooling"] == pytest.approx(
        metrics["ztsurv"]["c_index_mean"] - max(metrics["mean_pool"]["c_index_mean"], metrics["abmil"]["c_index_mean"]))
    assert metrics["compute_pixel_ratio_processed"] > 100  # 20x tiles against a 50x thumbnail
    assert metrics["compute_time_ratio"] > 0
    assert 0 <= metrics["segmentation_dice_tumour"] <= 1

    pointer = json.loads((project / "runs" / "ztsurv" / "mlflow_run.json").read_text())
    c = track.client()
    parent = c.get_run(pointer["run_id"])
    assert parent.info.status == "FINISHED" and parent.data.tags["profile"] == "tiny"
    runs = c.search_runs([parent.info.experiment_id])
    by_variant = {r.data.tags["variant"]: r for r in runs if r.info.run_id != parent.info.run_id}
    folds = yaml.safe_load((project / "params.yaml").read_text())["ztsurv"]["profiles"]["tiny"]["folds"]
    assert set(by_variant) == set(METHODS) | {f"{m}/fold{k}" for m in METHODS for k in range(folds)}
    for m in METHODS:
        assert by_variant[m].data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert by_variant[f"{m}/fold0"].data.tags["mlflow.parentRunId"] == by_variant[m].info.run_id
    assert c.get_metric_history(by_variant["ztsurv/fold0"].info.run_id, "train_cox_loss")
    pngs = {a.path.rsplit("/", 1)[-1] for a in c.list_artifacts(parent.info.run_id, "plots")}
    assert {"segmentation_overlays.png", "graph_one_slide.png", "km_risk_groups.png"} <= pngs
    assert all((project / "plots" / "ztsurv" / p).exists() for p in pngs)
    assert (project / "models" / "ztsurv" / "ztsurv" / "fold0.pt").exists()
    assert json.loads((project / "models" / "ztsurv" / "run.json").read_text())["complete"]


def test_bad_parameters_fail_before_any_work_naming_the_key(project):
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["wsi"]["profiles"]["tiny"]["patinets"] = 3
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    with pytest.raises(ParamsError, match="wsi.profiles.tiny.patinets: unknown parameter"):
        wsi_prep.resolve(read_params(project / "params.yaml"), "tiny")
    assert flows_cli(["run", "wsi-cohort", "--profile", "tiny"]) == 2
    assert not (project / "data").exists()
    with pytest.raises(ParamsError, match="ztsurv.profiles.tiny.til_threshold"):
        run_method("ztsurv", "tiny", ["til_threshold=1.5"])
