"""The NGN-M flow: its outputs in the tiny DAG (a row per optimizer on that optimizer's MLflow run,
its per-problem sweeps nested under it, plots); the paper profile without its real data fails
before any work, naming the key."""
from __future__ import annotations

import json

import pytest
import yaml

from flows.launch import run_method
from paperline.config import ParamsError
from paperline.methods.ngn_m.claims import SPECS
from paperline.metrics import validate_metrics
from tasks import track
from tests.conftest import finished_flow_runs, report_rows

OPTIMIZERS = ["adam", "ngn", "ngn_m", "ngn_md", "sgd", "sgdm"]


def test_tiny_dag_outputs(dag):
    path = dag / "results" / "ngn_m.json"
    metrics = validate_metrics(json.loads(path.read_text()), str(path))
    problems = yaml.safe_load((dag / "params" / "ngn_m.yaml").read_text())["ngn_m"]["profiles"]["tiny"]["problems"]
    assert sorted(metrics.rows) == OPTIMIZERS == sorted(report_rows(dag, "ngn_m"))
    assert (metrics.baseline, metrics.primary_metric, metrics.higher_is_better) == ("sgdm", "mean_decades", True)
    assert metrics.details["band"] == 0.1 and metrics.headline["grid_decades"] == pytest.approx(2.0)
    rows = metrics.rows
    for row in rows.values():
        for problem in problems:
            assert 0 <= row[f"{problem}_decades"] <= 2.0 + 1e-9
        assert row["least_squares_best_loss"] > 0 and 0 < row["digits_best_accuracy"] <= 1
    assert metrics.headline["ngn_m_minus_sgdm_mean_decades"] == pytest.approx(
        rows["ngn_m"]["mean_decades"] - rows["sgdm"]["mean_decades"])
    names = {c.name for c in metrics.claims}
    assert metrics.claims and names <= {s.name for s in SPECS} and any(c.trivial for c in metrics.claims)
    assert {"ngn_m_wider_band_than_sgdm", "ngn_m_best_beats_initial_digits"} <= names
    assert all(c.seeds <= 2 for c in metrics.claims)  # tiny sweeps two seeds
    assert sorted(metrics.details["decades_by_seed"]["ngn_m"]["digits"]) == ["0", "1"]
    assert 0 <= metrics.details["initial_model"]["digits"]["accuracy"] <= 1
    variants = sorted(f"{p}-{o}" for p in problems for o in OPTIMIZERS)
    assert sorted(p.name for p in (dag / "models" / "ngn_m").iterdir() if p.is_dir()) == variants

    parent, children = finished_flow_runs(dag, "ngn_m")
    c = track.client()
    assert parent.data.tags["data_version"].startswith("sha256:")  # scikit-learn's bundled files
    assert not any("/" in k for k in parent.data.metrics)  # headline figures only
    assert sorted(r.data.tags["variant"] for r in children) == OPTIMIZERS
    assert all(r.info.status == "FINISHED" for r in children)
    for child in children:  # each optimizer's run carries its row, under the same names
        row = rows[child.data.tags["variant"]]
        assert child.data.metrics["mean_decades"] == row["mean_decades"]
        assert child.data.metrics["digits_best_accuracy"] == row["digits_best_accuracy"]
    ngn_m = next(r for r in children if r.data.tags["variant"] == "ngn_m")
    nested = c.search_runs([parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{ngn_m.info.run_id}'")
    assert sorted(r.data.tags["variant"] for r in nested) == sorted(f"{p}-ngn_m" for p in problems)
    sweep = next(r for r in nested if r.data.tags["variant"] == "digits-ngn_m")
    gamma = c.get_metric_history(sweep.info.run_id, "gamma/c_1.0e00")
    assert len(gamma) > 1 and all(0 < m.value <= 1.0 + 1e-9 for m in gamma)
    assert len(c.get_metric_history(sweep.info.run_id, "final_accuracy_by_c_index")) == 3
    pngs = sorted(a.path.rsplit("/", 1)[-1] for a in c.list_artifacts(parent.info.run_id, "plots")
                  if a.path.endswith(".png"))
    assert pngs == ["final_vs_c.png", "gamma_trace.png"]
    assert sorted(p.name for p in (dag / "plots" / "ngn_m").glob("*.png")) == pngs
    assert (dag / "plots" / "ngn_m" / "sweep_digits.csv").read_text().startswith("c,sgd_loss,sgd_accuracy")
    assert json.loads((dag / "models" / "ngn_m" / "run.json").read_text())["complete"]


def test_paper_profile_without_its_data_fails_naming_the_key(project, prefect_server):
    with pytest.raises(ParamsError, match=r"ngn_m\.problems\.cifar10_resnet20\.data_dir: .* lacks data_batch_1"):
        run_method("ngn_m", "paper")
    assert not (project / "models" / "ngn_m").exists()  # nothing started
