"""The PubSub-VFL flow's outputs in the tiny DAG (the record, a report row and an MLflow child run
per variant with a run per seed under it, the active party alone, the claims, the plan, plots, the
final models), and a missing or malformed table refused before any work."""
from __future__ import annotations

import json
import pickle

import pytest

from paperline.methods.pubsub_vfl.claims import SPECS
from paperline.metrics import validate_metrics
from tests.conftest import finished_flow_runs, report_rows

VARIANTS = ["vfl", "vfl_ps", "avfl", "avfl_ps", "pubsub_vfl"]


def test_tiny_dag_outputs(dag):
    path = dag / "results" / "pubsub_vfl.json"
    metrics = validate_metrics(json.loads(path.read_text()), str(path))
    assert sorted(metrics.rows) == sorted(report_rows(dag, "pubsub_vfl")) == sorted(VARIANTS + ["active_alone"])
    assert (metrics.profile, metrics.baseline, metrics.primary_metric, metrics.higher_is_better) == \
        ("tiny", "vfl", "auc", True)
    assert 0.5 < metrics.rows["active_alone"]["auc"] <= 1 and metrics.rows["active_alone"]["seeds"] == 1
    for name in VARIANTS:
        row = metrics.rows[name]
        assert 0.5 < row["auc"] <= 1, name  # breast cancer: every variant learns
        assert 0 <= row["idle_fraction_active"] <= 1 and 0 <= row["idle_fraction_passive"] <= 1, name
        assert row["wall_s"] > 0 and 0 < row["cpu_utilisation"] and row["dropped_batches"] == 0, name
        assert (row["workers_active"], row["workers_passive"]) == \
            ((1, 1) if name in ("vfl", "avfl") else (metrics.details["plan"]["w_a"], metrics.details["plan"]["w_p"]))
    headline = metrics.headline
    assert not any("claim" in k for k in headline)
    claims = {c.name: c for c in metrics.claims}
    assert claims and set(claims) <= {s.name for s in SPECS} and any(c.trivial for c in claims.values())
    alone = claims["pubsub_vfl_auc_above_active_alone"]
    assert alone.trivial and alone.versus == "active_alone" and alone.seeds == 1 and alone.verdict == "inconclusive"
    assert claims["pubsub_vfl_auc_not_below_best_baseline"].versus in ("vfl", "vfl_ps", "avfl", "avfl_ps")
    assert claims["pubsub_vfl_faster_than_avfl_ps"].method_mean == pytest.approx(metrics.rows["pubsub_vfl"]["wall_s"])
    assert headline["idle_ratio_vs_vfl"] == pytest.approx(
        metrics.rows["pubsub_vfl"]["idle_fraction"] / metrics.rows["vfl"]["idle_fraction"])
    plan = metrics.details["plan"]
    assert plan["B"] in (32, 64) and plan["w_a"] in (1, 2) and plan["w_p"] in (1, 2)

    from tasks import track

    parent, children = finished_flow_runs(dag, "pubsub_vfl")
    assert sorted(r.data.tags["variant"] for r in children) == sorted(VARIANTS + ["active_alone"])
    for child in children:
        variant = child.data.tags["variant"]
        row = metrics.rows[variant]
        assert child.data.metrics["auc"] == row["auc"]
        seeds = track.client().search_runs([parent.info.experiment_id],
                                           filter_string=f"tags.mlflow.parentRunId = '{child.info.run_id}'")
        assert [r.info.run_name for r in seeds] == [f"{variant}/seed0"]  # a run per seed under the variant's
        assert seeds[0].data.metrics["auc"] == pytest.approx(row["auc"])
        if variant != "active_alone":
            assert child.data.metrics["idle_fraction"] == row["idle_fraction"]
    assert sorted(p.name for p in (dag / "plots" / "pubsub_vfl").glob("*.png")) == ["idle.png", "metric_vs_time.png"]
    final = pickle.loads((dag / "models" / "pubsub_vfl" / "pubsub_vfl" / "seed0.pkl").read_bytes())
    assert set(final) == {"active", "passive"} and set(final["active"]) == {"bottom", "top"}
    assert json.loads((dag / "models" / "pubsub_vfl" / "run.json").read_text())["complete"]


def test_a_missing_table_is_refused_before_any_work(dag, tmp_path):
    from paperline.methods.pubsub_vfl.config import PubSubVFLConfig
    from tasks.pubsub_vfl import data_version

    cfg = PubSubVFLConfig(data={"name": "file", "path": str(tmp_path / "bank.csv")})
    with pytest.raises(Exception, match="bank.csv"):
        data_version(cfg)


def test_a_malformed_table_exits_2_naming_its_line_and_touches_nothing(project, prefect_server, capsys):
    from flows.__main__ import main as flows_cli

    (project / "bank.csv").write_text('age,balance,y\n30,100,0\n"41,250,1\n52,80,0\n')  # an unterminated quote
    before = sorted(p.relative_to(project) for p in project.rglob("*"))
    assert flows_cli(["run", "pubsub_vfl", "--profile", "paper", "--set", "data.path=bank.csv"]) == 2
    err = capsys.readouterr().err
    assert "bank.csv: not a readable CSV table (Error tokenizing data. C error: EOF inside string" in err
    assert "Traceback" not in err
    assert sorted(p.relative_to(project) for p in project.rglob("*")) == before  # no run folder, no scratch
