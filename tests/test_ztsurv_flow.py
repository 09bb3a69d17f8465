"""The ZTSurv pipeline: the three WSI prep stages and the flow as the tiny DAG ran them (metrics,
a row per method, the mean over seeds, on that method's MLflow run with a run per seed nested
under it and the seed's fold runs under that, the claims, plots, checkpoints); and parameter errors."""
from __future__ import annotations

import json

import pytest
import yaml

from flows.__main__ import main as flows_cli
from flows.launch import run_method
from paperline.config import ParamsError, read_params
from paperline.methods.ztsurv.claims import SPECS
from paperline.metrics import validate_metrics
from tasks import track, wsi_prep
from tests.conftest import finished_flow_runs, report_rows

METHODS = ["random_risk", "composition_cox", "mean_pool", "abmil", "gcn", "ztsurv"]


def test_tiny_dag_outputs(dag):
    index = json.loads((dag / "data" / "wsi" / "thumbnails" / "index.json").read_text())
    assert len(index["slides"]) == 16 and index["failed"] == []

    path = dag / "results" / "ztsurv.json"
    metrics = validate_metrics(json.loads(path.read_text()), str(path))
    rows, headline = metrics.rows, metrics.headline
    assert sorted(rows) == sorted(METHODS) == sorted(report_rows(dag, "ztsurv"))
    tiny = yaml.safe_load((dag / "params" / "ztsurv.yaml").read_text())["ztsurv"]["profiles"]["tiny"]
    seeds, folds = tiny["seeds"], tiny["folds"]
    per_seed = metrics.details["c_index_per_seed"]
    for m, row in rows.items():
        assert 0 <= row["c_index_mean"] <= 1 and 0 <= row["c_index_oof"] <= 1 and row["c_index_std"] >= 0
        assert row["seeds"] == len(seeds) and list(per_seed[m]) == [str(s) for s in seeds]
        assert row["c_index_mean"] == pytest.approx(sum(per_seed[m].values()) / len(seeds))  # the mean over seeds
    assert per_seed["ztsurv"]["0"] != per_seed["ztsurv"]["1"]  # other folds and inits
    claims = {c.name: c for c in metrics.claims}
    assert set(claims) == {s.name for s in SPECS} and claims["ztsurv_above_random_risk"].trivial
    assert all(c.seeds == len(seeds) and c.verdict == "inconclusive" for c in claims.values())  # 2 < 3 seeds
    assert claims["ztsurv_above_gcn"].method_mean == pytest.approx(rows["ztsurv"]["c_index_mean"])
    best_pooling = max(("mean_pool", "abmil"), key=lambda m: rows[m]["c_index_mean"])
    assert (metrics.baseline, metrics.primary_metric, metrics.higher_is_better) == (best_pooling, "c_index_mean", True)
    assert metrics.details["cohort"]["patients"] == 16 and metrics.details["cohort"]["failed_slides"] == 0
    assert headline["gain_over_best_pooling"] == pytest.approx(
        rows["ztsurv"]["c_index_mean"] - rows[best_pooling]["c_index_mean"])
    assert headline["compute_pixel_ratio_processed"] > 100  # 20x tiles against a 50x thumbnail
    assert headline["compute_time_ratio"] > 0
    assert 0 <= headline["segmentation_dice_tumour"] <= 1
    compute = metrics.tables["compute_accounting"]
    assert compute["patch_tiles_20x"]["pixels_processed_per_slide"] == pytest.approx(
        headline["compute_pixel_ratio_processed"] * compute["pipeline_50x"]["pixels_processed_per_slide"])

    parent, children = finished_flow_runs(dag, "ztsurv")
    c = track.client()
    assert not any("/" in k for k in parent.data.metrics)  # headline figures only
    by_variant = {r.data.tags["variant"]: r for r in children}
    assert sorted(by_variant) == sorted(METHODS)
    for m, run in by_variant.items():  # each method's run carries its row, its seeds nested under it, their folds under those
        assert run.info.status == "FINISHED" and run.data.metrics["c_index_mean"] == rows[m]["c_index_mean"]
        nested = c.search_runs([parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{run.info.run_id}'")
        assert sorted(r.data.tags["variant"] for r in nested) == [f"{m}/seed{s}" for s in seeds]
        for seed_run in nested:
            seed = seed_run.data.tags["variant"].rsplit("/seed", 1)[1]
            assert seed_run.data.metrics["c_index_mean"] == pytest.approx(per_seed[m][seed])
            fold_runs = c.search_runs([parent.info.experiment_id],
                                      filter_string=f"tags.mlflow.parentRunId = '{seed_run.info.run_id}'")
            assert sorted(r.data.tags["variant"] for r in fold_runs) == [f"{m}/seed{seed}/fold{k}" for k in range(folds)]
            if m == "ztsurv":
                fold0 = next(r for r in fold_runs if r.data.tags["variant"].endswith("/fold0"))
                assert c.get_metric_history(fold0.info.run_id, "train_cox_loss")
    pngs = {a.path.rsplit("/", 1)[-1] for a in c.list_artifacts(parent.info.run_id, "plots")}
    assert {"segmentation_overlays.png", "graph_one_slide.png", "km_risk_groups.png"} <= pngs
    assert all((dag / "plots" / "ztsurv" / p).exists() for p in pngs)
    assert (dag / "models" / "ztsurv" / "ztsurv" / "seed1" / "fold0.pt").exists()
    assert json.loads((dag / "models" / "ztsurv" / "run.json").read_text())["complete"]


def test_bad_parameters_fail_before_any_work_naming_the_key(project):
    params = yaml.safe_load((project / "params" / "wsi.yaml").read_text())
    params["wsi"]["profiles"]["tiny"]["patinets"] = 3
    (project / "params" / "wsi.yaml").write_text(yaml.safe_dump(params))
    with pytest.raises(ParamsError, match="wsi.profiles.tiny.patinets: unknown parameter"):
        wsi_prep.resolve(read_params(project / "params"), "tiny")
    assert flows_cli(["run", "wsi-cohort", "--profile", "tiny"]) == 2
    assert not (project / "data").exists()
    with pytest.raises(ParamsError, match="ztsurv.profiles.tiny.til_threshold"):
        run_method("ztsurv", "tiny", ["til_threshold=1.5"])
