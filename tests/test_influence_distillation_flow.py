"""The Influence Distillation pipeline in the tiny DAG: the tulu-pool stage wrote the pool,
tulu-select the selected ids of every method, the flow a metrics row per selection method (on its
MLflow child run) against random selection, with the cost ratio and the Spearman correlation, plots
as MLflow artifacts and DVC files. A selection made with other parameters is refused; a flow killed
mid-fine-tuning resumes to the DAG's metrics."""
from __future__ import annotations

import json
import shutil

import pytest
import yaml

from flows.launch import run_method
from paperline.methods.influence_distillation import pipeline
from paperline.metrics import validate_metrics
from paperline.train.checkpoint import load_checkpoint
from tasks import track
from tests.conftest import finished_flow_runs, report_rows

METHOD = "influence_distillation"


def test_tiny_dag_outputs(dag):
    manifest = json.loads((dag / "data" / "tulu" / "manifest.json").read_text())
    assert manifest["pool_size"] == 120 and manifest["skipped"]["skipped"] == 0
    path = dag / "metrics" / f"{METHOD}.json"
    metrics = validate_metrics(json.loads(path.read_text()), str(path))
    tiny = yaml.safe_load((dag / "params.yaml").read_text())[METHOD]["profiles"]["tiny"]
    methods = ["random", "rds_plus", "exact_first_order", "influence_distillation"]
    assert sorted(metrics.rows) == sorted(report_rows(dag, METHOD)) == sorted(methods)
    assert (metrics.profile, metrics.baseline, metrics.primary_metric, metrics.higher_is_better) == \
        ("tiny", "random", "target_accuracy_mean", True)
    rows, headline = metrics.rows, metrics.headline
    for m in methods:
        for key in ("target_loss_mean", "target_accuracy_mean", "gsm8k_like_loss", "squad_like_token_accuracy",
                    "mmlu_like_choice_accuracy", "selection_wall_s"):
            assert isinstance(rows[m][key], float), (m, key)
    pool = 120
    assert rows["exact_first_order"]["selection_gradient_evaluations"] == pool + 3 * 4  # pool + targets
    assert rows["influence_distillation"]["selection_gradient_evaluations"] == tiny["num_landmarks"] + 3 * 4
    assert headline["cost_ratio_gradient_evaluations"] == (16 + 12) / (120 + 12)
    assert headline["cost_ratio_wall_time"] > 0
    assert -1 <= headline["id_vs_exact_spearman_of_target_mean"] <= 1
    assert headline["qp_relative_weight_difference_smallest_lr"] < headline["qp_relative_weight_difference_largest_lr"]
    qp = metrics.tables["qp_check"]
    assert sorted(qp) == sorted(f"lr={lr:g}" for lr in tiny["qp"]["lrs"])
    assert qp["lr=0.001"]["relative_weight_difference"] == headline["qp_relative_weight_difference_smallest_lr"]
    assert set(metrics.tables["before_finetune"]["warmup_only"]) >= {"gsm8k_like_loss", "mmlu_like_choice_accuracy"}
    assert sorted(metrics.tables["propagation_by_target"]) == ["gsm8k_like", "mmlu_like", "squad_like"]
    curve = metrics.tables["landmark_curve"]  # the landmark-count curve, one row per count
    assert [r["num_landmarks"] for r in curve.values()] == tiny["landmark_curve"]
    assert all(-1 <= r["spearman_of_target_mean"] <= 1 for r in curve.values())
    # its point at the run's own landmark count is Influence Distillation's own propagation
    assert curve["landmarks=16"]["spearman_of_target_mean"] == pytest.approx(
        headline["id_vs_exact_spearman_of_target_mean"], abs=1e-3)
    assert (dag / "plots" / METHOD / "landmark_curve.png").exists()

    selected = (dag / "data" / "tulu" / "selection" / "influence_distillation.jsonl").read_text().splitlines()
    chosen = [json.loads(line) for line in selected]
    assert len(chosen) == tiny["select_k"] and len({r["id"] for r in chosen}) == len(chosen)
    assert all(r["weight"] == 1.0 for r in chosen)

    parent, children = finished_flow_runs(dag, METHOD)
    c = track.client()
    assert parent.data.tags["data_version"].startswith("sha256:")
    assert sorted(r.data.tags["variant"] for r in children) == sorted(methods + ["qp_check"])
    assert all(r.info.status == "FINISHED" for r in children)
    # the headline figures and the warm-up's curve (the start of every fine-tune): no per-variant values
    assert set(parent.data.metrics) == set(headline) | {"warmup/train_loss"}
    for child in children:
        name = child.data.tags["variant"]
        if name in rows:  # each selection's run carries its row, under the same names on every run
            assert {k: child.data.metrics[k] for k in rows[name]} == rows[name]
            assert len(c.get_metric_history(child.info.run_id, "train_loss")) > 1
        else:
            assert child.data.metrics["relative_weight_difference/lr_0.001"] == qp["lr=0.001"]["relative_weight_difference"]
    pngs = {a.path.rsplit("/", 1)[-1] for a in c.list_artifacts(parent.info.run_id, "plots") if a.path.endswith(".png")}
    assert pngs == {p.name for p in (dag / "plots" / METHOD).glob("*.png")}
    assert {"target_accuracy.png", "propagated_vs_exact.png", "qp_first_vs_second_order.png"} <= pngs
    assert (dag / "plots" / METHOD / "target_metrics.csv").read_text().startswith("method,")
    assert json.loads((dag / "models" / METHOD / "run.json").read_text())["complete"]


@pytest.mark.dag_stage("influence_distillation")
def test_a_mismatched_selection_is_refused_and_a_killed_run_resumes_to_the_dag_metrics(dag_stage, project, prefect_server):
    expected = json.loads((dag_stage / "metrics" / f"{METHOD}.json").read_text())
    shutil.copytree(dag_stage / "data" / "tulu", project / "data" / "tulu")  # the DAG's pool and selections

    # a selection made with other parameters than the flow's is refused, naming the key
    from flows.launch import resolve
    from tasks.influence_distillation import data

    with pytest.raises(ValueError, match="select_k"):
        data(resolve(METHOD, "tiny", ["select_k=5"])[1])

    # killed in the middle of one fine-tuning (after its first checkpoint), then run again
    real_train = pipeline.train

    def killed_mid_way(model, optimizer, data, index, batches, checkpoint_path, fingerprint, **kw):
        if fingerprint["method"] != "exact_first_order":
            return real_train(model, optimizer, data, index, batches, checkpoint_path, fingerprint, **kw)
        real_train(model, optimizer, data, index, batches, checkpoint_path, fingerprint, checkpoint_every=1,
                   stop_after=2)
        raise RuntimeError("killed mid-way")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline, "train", killed_mid_way)
        with pytest.raises(RuntimeError, match="killed mid-way"):
            run_method(METHOD, "tiny")
    assert not (project / "metrics" / f"{METHOD}.json").exists()
    assert not json.loads((project / "models" / METHOD / "run.json").read_text())["complete"]
    partial = load_checkpoint(project / "models" / METHOD / "finetune" / "exact_first_order.pt")["progress"]
    assert partial["step"] == 1 and not partial["done"]
    run_method(METHOD, "tiny")
    assert json.loads((project / "metrics" / f"{METHOD}.json").read_text()) == expected
