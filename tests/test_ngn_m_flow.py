"""The NGN-M flow end to end at the tiny profile: metrics rows, plots, MLflow parent and children;
the paper profile without its real data fails before any work, naming the key."""
from __future__ import annotations

import json

import pytest
import yaml

from flows.launch import run_method
from tasks import track
from paperline.config import ParamsError
from tests.conftest import finished_flow_runs

OPTIMIZERS = ["adam", "ngn", "ngn_m", "ngn_md", "sgd", "sgdm"]


def test_tiny_flow_writes_metrics_plots_and_mlflow_runs(project, prefect_server):
    run_method("ngn_m", "tiny")
    metrics = json.loads((project / "metrics" / "ngn_m.json").read_text())
    problems = yaml.safe_load((project / "params.yaml").read_text())["ngn_m"]["profiles"]["tiny"]["problems"]
    assert sorted(k for k, v in metrics.items() if isinstance(v, dict)) == OPTIMIZERS
    assert metrics["band"] == 0.1 and metrics["grid_decades"] == pytest.approx(2.0)
    for row in (metrics[o] for o in OPTIMIZERS):
        for problem in problems:
            assert 0 <= row[f"{problem}_decades"] <= 2.0 + 1e-9
        assert row["least_squares_best_loss"] > 0 and 0 < row["digits_best_accuracy"] <= 1
    variants = sorted(f"{p}-{o}" for p in problems for o in OPTIMIZERS)
    assert sorted(p.name for p in (project / "models" / "ngn_m").iterdir() if p.is_dir()) == variants

    parent, children = finished_flow_runs(project, "ngn_m")
    c = track.client()
    assert parent.data.tags["data_version"].startswith("sha256:")  # scikit-learn's bundled files
    assert sorted(r.data.tags["variant"] for r in children) == variants
    assert all(r.info.status == "FINISHED" for r in children)
    child = next(r for r in children if r.data.tags["variant"] == "digits-ngn_m")
    gamma = c.get_metric_history(child.info.run_id, "gamma/c_1.0e00")
    assert len(gamma) > 1 and all(0 < m.value <= 1.0 + 1e-9 for m in gamma)
    assert len(c.get_metric_history(child.info.run_id, "final_accuracy_by_c_index")) == 3
    pngs = sorted(a.path.rsplit("/", 1)[-1] for a in c.list_artifacts(parent.info.run_id, "plots")
                  if a.path.endswith(".png"))
    assert pngs == ["final_vs_c.png", "gamma_trace.png"]
    assert sorted(p.name for p in (project / "plots" / "ngn_m").glob("*.png")) == pngs
    assert (project / "plots" / "ngn_m" / "sweep_digits.csv").read_text().startswith("c,sgd_loss,sgd_accuracy")
    assert json.loads((project / "models" / "ngn_m" / "run.json").read_text())["complete"]


def test_paper_profile_without_its_data_fails_naming_the_key(project, prefect_server):
    with pytest.raises(ParamsError, match=r"ngn_m\.problems\.cifar10_resnet20\.data_dir: .* lacks data_batch_1"):
        run_method("ngn_m", "paper")
    assert not (project / "models" / "ngn_m").exists()  # nothing started
