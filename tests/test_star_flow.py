"""The STAR flow's outputs in the tiny DAG (the record with a row per task, variant and budget and
the claims, a child MLflow run per row carrying it with a nested run per seed and its learning curve,
plots, checkpoints), and an environment the agents cannot use refused before any work, naming it."""
from __future__ import annotations

import json

import pytest
import yaml

from paperline.methods.star.claims import SPECS
from paperline.metrics import validate_metrics
from tasks import track
from tests.conftest import finished_flow_runs, report_rows


def _rows(project) -> list[str]:
    tiny = yaml.safe_load((project / "params" / "star.yaml").read_text())["star"]["profiles"]["tiny"]
    return sorted(f"{t['name']}-{v}" if v == "oracle" else f"{t['name']}-{v}-{b}"
                  for t in tiny["tasks"] for v in tiny["variants"] for b in ([None] if v == "oracle" else t["budgets"]))


def test_tiny_dag_outputs(dag):
    path = dag / "results" / "star.json"
    metrics = validate_metrics(json.loads(path.read_text()), str(path))
    rows = _rows(dag)
    assert sorted(metrics.rows) == rows == sorted(report_rows(dag, "star"))
    assert (metrics.profile, metrics.primary_metric, metrics.higher_is_better) == ("tiny", "paper_score", True)
    for name, row in metrics.rows.items():
        assert row["seeds"] == 1 and isinstance(row["return"], float) and isinstance(row["overestimation"], float)
        if row["variant"] == "oracle":
            assert row["normalized_return"] == 1.0 and row["labels"] == 0 and row["pref_accuracy"] is None
        else:
            assert row["labels"] == row["budget"] == 4, name
            assert 0 <= row["pref_accuracy"] <= 1, name
    headline = metrics.headline
    for task in ("pendulum", "grid"):
        gap = metrics.rows[f"{task}-star-4"]["normalized_return"] - metrics.rows[f"{task}-pebble-4"]["normalized_return"]
        assert headline[f"{task}_4_star_minus_pebble"] == pytest.approx(gap)
    assert not any("claim" in k or "_above_" in k for k in headline)
    claims = {c.name: c for c in metrics.claims}
    assert set(claims) <= {s.name for s in SPECS} and any(c.trivial for c in claims.values())
    # every variant ran on both kinds of task, and the offline extractions: every claim is stated but
    # MRN's and Preference Transformer's (the paper profile runs them; MRN on continuous tasks only)
    assert set(claims) == {s.name for s in SPECS} - {"star_above_mrn_continuous", "star_above_mrn_discrete",
                                                     "offline_star_above_pt"}
    assert all(c.seeds == 1 and c.verdict == "inconclusive" for c in claims.values())  # one seed: no verdict
    assert claims["star_above_pebble_continuous"].effect == pytest.approx(
        metrics.rows["pendulum-star-4"]["normalized_return"] - metrics.rows["pendulum-pebble-4"]["normalized_return"])
    assert set(metrics.details["curves"]) == set(rows)

    parent, children = finished_flow_runs(dag, "star")
    c = track.client()
    assert [d.dataset.digest for d in parent.inputs.dataset_inputs] == ["generated"]
    offline_children = [r for r in children if r.data.tags["variant"].startswith("offline-")]
    children = [r for r in children if not r.data.tags["variant"].startswith("offline-")]
    assert sorted(r.data.tags["variant"] for r in children) == rows
    assert all(r.info.status == "FINISHED" for r in children)
    for child in children:
        row = metrics.rows[child.data.tags["variant"]]
        assert child.data.metrics["normalized_return"] == row["normalized_return"]
    star = next(r for r in children if r.data.tags["variant"] == "pendulum-star-4")
    seeds = c.search_runs([parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{star.info.run_id}'")
    assert [r.data.tags["variant"] for r in seeds] == ["pendulum-star-4/seed0"]
    curve = c.get_metric_history(seeds[0].info.run_id, "eval_return")
    assert [m.step for m in curve] == metrics.details["curves"]["pendulum-star-4"]["step"]
    arts = {a.path.rsplit("/", 1)[-1] for a in c.list_artifacts(parent.info.run_id, "plots")}
    assert {"learning_curve_pendulum_4.png", "learning_curve_grid_4.png", "normalized_return.png", "paper_score.png",
            "overestimation_pendulum_4.png", "overestimation_grid_4.png",
            "overestimation.png", "learning_curve_grid_4.csv"} <= arts
    assert (dag / "plots" / "star" / "learning_curve_pendulum_4.csv").read_text().startswith("step,oracle,pebble,")
    assert (dag / "models" / "star" / "grid-star-4" / "seed0.pt").is_file()
    assert json.loads((dag / "models" / "star" / "run.json").read_text())["complete"]
    _offline(dag, metrics, c, offline_children, arts)


def _offline(dag, metrics, c, children, arts):
    """The offline variant's rows: one per extraction and the dataset's, normalised against the
    oracle's SAC of the same seed; a child run per extraction with its seed nested; the generated
    files in the layouts the loaders read."""
    from paperline.methods.star.summary import normalised
    from paperline.rl.offline import load_dataset, load_preference_labels

    table = metrics.tables["offline"]
    assert sorted(table) == ["offline-awr", "offline-dataset", "offline-iql", "offline-mr", "offline-star"]
    (seed,) = metrics.details["offline"]
    assert seed["labels"] == 8 and seed["transitions"] == 3 * 49  # 3 policies × 1 episode, the timeout row dropped
    assert set(seed["behaviour_returns"]) == {"random", "noisy", "expert"}
    for v in ("star", "iql", "awr", "mr"):
        row = table[f"offline-{v}"]
        assert row["seeds"] == 1 and 0 <= row["pref_accuracy"] <= 1
        assert row["normalized_return"] == pytest.approx(
            normalised(seed["variants"][v]["return"], seed["expert_return"], seed["random_return"]))
    assert table["offline-mr"]["pref_accuracy"] == seed["mr_pref_accuracy"]  # its own reward model's
    for base in ("iql", "awr", "mr", "dataset"):
        gap = table["offline-star"]["normalized_return"] - table[f"offline-{base}"]["normalized_return"]
        assert metrics.headline[f"offline_star_minus_{base}"] == pytest.approx(gap)
        claim = next(c for c in metrics.claims if c.name == f"offline_star_above_{base}")
        assert claim.effect == pytest.approx(gap) and claim.seeds == 1
    assert sorted(r.data.tags["variant"] for r in children) == ["offline-awr", "offline-iql", "offline-mr",
                                                                  "offline-star"]
    star = next(r for r in children if r.data.tags["variant"] == "offline-star")
    nested = c.search_runs([star.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{star.info.run_id}'")
    assert [r.data.tags["variant"] for r in nested] == ["offline-star/seed0"]
    assert nested[0].data.metrics["normalized_return"] == pytest.approx(table["offline-star"]["normalized_return"])
    assert "offline.png" in arts
    out = dag / "models" / "star" / "offline" / "seed0"
    data = load_dataset(out / "data.hdf5")
    assert len(data) == seed["transitions"] and len(load_preference_labels(out / "labels", data, 10).y) == 8


def test_an_environment_the_agents_cannot_take_is_refused_before_any_work(project):
    """`method_run` calls `data` before it opens the run directory or any MLflow run; EnvError is a
    DataError, which `python -m flows run` reports with exit status 1."""
    from flows.launch import resolve
    from paperline.io import DataError
    from tasks.star import data

    task = ("{name: bad, env_id: CartPole-v1, kind: continuous, episode_steps: 10, steps: 50, seed_steps: 5, "
            "budgets: [2], segment: 5}")
    _, cfg = resolve("star", "tiny", [f"tasks=[{task}]", "offline=null"])
    with pytest.raises(DataError, match=r"'CartPole-v1': action space Discrete\(2\) is not one the continuous"):
        data(cfg)
    _, cfg = resolve("star", "tiny", [f"tasks=[{task.replace('CartPole-v1', 'Nope-v3')}]", "offline=null"])
    with pytest.raises(DataError, match=r"'Nope-v3': not a registered gymnasium environment"):
        data(cfg)
