"""The deep NC flow: its outputs in the tiny DAG (metrics, report rows, MLflow runs a user can
compare, plots, checkpoints), and one more run under the Dask runner that must reproduce them."""
from __future__ import annotations

import json

import pytest
import yaml

from flows.launch import run_method
from paperline.methods.dnc.claims import SPECS
from paperline.metrics import validate_metrics
from tasks import track
from tests.conftest import finished_flow_runs, report_rows


def _variants(project) -> list[str]:
    tiny = yaml.safe_load((project / "params" / "dnc.yaml").read_text())["dnc"]["profiles"]["tiny"]
    return sorted(f"K{K}_L{L}" for K in tiny["classes"] for L in tiny["depths"])


def test_tiny_dag_outputs(dag):
    path = dag / "results" / "dnc.json"
    metrics = validate_metrics(json.loads(path.read_text()), str(path))
    variants = _variants(dag)
    assert sorted(metrics.rows) == variants and metrics.profile == "tiny"
    declared = {s.name for s in SPECS}
    assert metrics.claims and {c.name for c in metrics.claims} <= declared
    assert any(c.trivial for c in metrics.claims)
    assert {"dnc_l1_objective_at_f_dnc", "dnc_l1_rank_k_minus_1"} <= {c.name for c in metrics.claims}  # tiny has L = 1
    for row in metrics.rows.values():
        for key in ("dnc_objective", "cosine_objective", "best_trained_objective", "numerical_rank_best",
                    "dnc_fraction", "dnc_fraction_width_1K", "dnc_fraction_width_2K", "nc1", "nc2", "nc3"):
            assert isinstance(row[key], (int, float)), key
        assert 0 <= row["dnc_fraction"] <= 1
    assert sorted(report_rows(dag, "dnc")) == variants

    parent, children = finished_flow_runs(dag, "dnc")
    c = track.client()
    assert c.get_experiment(parent.info.experiment_id).tags[track.EXPERIMENT_KIND_TAG] == track.EXPERIMENT_KIND
    assert parent.data.tags["git_dirty"] in ("true", "false") and len(parent.data.tags["git_commit"]) == 40
    assert [d.dataset.digest for d in parent.inputs.dataset_inputs] == ["generated"]
    assert sorted(r.data.tags["variant"] for r in children) == variants
    assert all(r.info.status == "FINISHED" for r in children)
    for child in children:  # the same metric names on every child: the chart view lines them up
        row = metrics.rows[child.data.tags["variant"]]
        assert child.data.metrics["best_trained_objective"] == row["best_trained_objective"]
        assert child.data.metrics["dnc_fraction_width_2K"] == row["dnc_fraction_width_2K"]
    steps = c.get_metric_history(children[0].info.run_id, "objective/d4/seed0")
    assert len(steps) > 1 and steps[-1].value < steps[0].value  # per-step curve, decreasing
    assert any(a.path.endswith(".pt") for a in c.list_artifacts(children[0].info.run_id, "checkpoints"))
    assert not any("/" in k for k in parent.data.metrics)  # headline figures only, no variant/metric bars
    assert {a.path for a in c.list_artifacts(parent.info.run_id)} >= {"comparison.json", "comparison.csv", "plots"}
    pngs = [a.path for a in c.list_artifacts(parent.info.run_id, "plots") if a.path.endswith(".png")]
    assert len(pngs) >= 4
    assert sorted(p.name for p in (dag / "plots" / "dnc").glob("*.png")) == sorted(p.rsplit("/", 1)[-1] for p in pngs)
    assert json.loads((dag / "models" / "dnc" / "run.json").read_text())["complete"]


@pytest.mark.dag_stage("dnc")
@pytest.mark.parametrize("runner", ["dask", "ray"])
def test_scale_out_runners_reproduce_the_dag_run(runner, dag_stage, project, prefect_server):
    """The same seed gives the same metrics, and the Dask and Ray runners give what the thread
    runner gave."""
    expected = json.loads((dag_stage / "results" / "dnc.json").read_text())
    runtime = project / "params" / "runtime.yaml"
    params = yaml.safe_load(runtime.read_text())
    params["runtime"]["task_runner"] = runner
    runtime.write_text(yaml.safe_dump(params))
    run_method("dnc", "tiny")
    assert json.loads((project / "results" / "dnc.json").read_text()) == expected
