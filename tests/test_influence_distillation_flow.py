"""The Influence Distillation pipeline in the tiny DAG: the tulu-pool stage wrote the pool,
tulu-select the selected ids of every method, the flow a metrics row per selection method (on its
MLflow child run, a run per fine-tuning seed under it) against random selection, the means over the
seeds and the claims paired by seed, with the cost ratio and the Spearman correlation, plots as
MLflow artifacts and DVC files. A selection made with other parameters is refused; a flow killed
mid-fine-tuning resumes to the DAG's metrics."""
from __future__ import annotations

import json
import shutil

import pytest
import yaml

from flows.launch import run_method
from paperline.methods.influence_distillation import pipeline
from paperline.methods.influence_distillation.claims import SPECS
from paperline.metrics import validate_metrics
from paperline.train.checkpoint import load_checkpoint
from tasks import track
from tasks.publish import claim_metrics
from tests.conftest import finished_flow_runs, report_rows

METHOD = "influence_distillation"


def test_tiny_dag_outputs(dag):
    manifest = json.loads((dag / "data" / "tulu" / "manifest.json").read_text())
    assert manifest["pool_size"] == 120 and manifest["skipped"]["skipped"] == 0
    path = dag / "results" / f"{METHOD}.json"
    metrics = validate_metrics(json.loads(path.read_text()), str(path))
    tiny = yaml.safe_load((dag / "params" / f"{METHOD}.yaml").read_text())[METHOD]["profiles"]["tiny"]
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
    # each row the mean over the fine-tuning seeds; the claims paired by seed, random selection the
    # trivial baseline, the convex check exact; two seeds decide nothing
    seeds = [str(s) for s in tiny["seeds"]]
    per_seed = metrics.details["per_seed"]
    for m in methods:
        assert list(per_seed[m]) == seeds and rows[m]["seeds"] == len(seeds)
        assert rows[m]["target_loss_mean"] == pytest.approx(
            sum(per_seed[m][s]["target_loss_mean"] for s in seeds) / len(seeds))
    # seed 0 fine-tunes the stage's random selection, seed 1 a draw of its own with the same budget
    stage_draw = (dag / "data" / "tulu" / "selection" / "random.jsonl").read_text().splitlines()
    own_draw = (dag / "models" / METHOD / "finetune" / "random" / "seed1.selection.jsonl").read_text().splitlines()
    assert len(own_draw) == len(stage_draw) == tiny["select_k"]
    assert [json.loads(r)["id"] for r in own_draw] != [json.loads(r)["id"] for r in stage_draw]
    assert not (dag / "models" / METHOD / "finetune" / "random" / "seed0.selection.jsonl").exists()
    assert metrics.claims and {c.name for c in metrics.claims} <= {s.name for s in SPECS}
    assert any(c.trivial and c.versus == "random" for c in metrics.claims)
    for c in metrics.claims:
        assert c.verdict in (("exact", "not_exact") if c.kind == "exact" else ("inconclusive",)), c.name
        assert c.kind == "exact" or c.seeds == len(seeds)

    selected = (dag / "data" / "tulu" / "selection" / "influence_distillation.jsonl").read_text().splitlines()
    chosen = [json.loads(line) for line in selected]
    assert len(chosen) == tiny["select_k"] and len({r["id"] for r in chosen}) == len(chosen)
    assert all(r["weight"] == 1.0 for r in chosen)

    parent, children = finished_flow_runs(dag, METHOD)
    c = track.client()
    assert parent.data.tags["data_version"].startswith("sha256:")
    assert sorted(r.data.tags["variant"] for r in children) == sorted(methods + ["qp_check"])
    assert all(r.info.status == "FINISHED" for r in children)
    # the headline figures, each claim's effect and interval and the warm-up's curve (the start of
    # every fine-tune): no per-variant values
    assert set(parent.data.metrics) == set(headline) | set(claim_metrics(metrics.claims)) | {"warmup/train_loss"}
    for child in children:
        name = child.data.tags["variant"]
        if name in rows:  # each selection's run carries its row, under the same names on every run
            assert {k: child.data.metrics[k] for k in rows[name]} == rows[name]
            nested = c.search_runs([parent.info.experiment_id],
                                   filter_string=f"tags.mlflow.parentRunId = '{child.info.run_id}'")
            assert sorted(r.info.run_name for r in nested) == sorted(f"{name}/seed{s}" for s in seeds)
            for seed_run in nested:  # a run per seed under it: its fine-tune's curve and its own row
                seed = seed_run.info.run_name.rsplit("/seed", 1)[1]
                assert seed_run.info.status == "FINISHED" and seed_run.data.params["seed"] == seed
                assert len(c.get_metric_history(seed_run.info.run_id, "train_loss")) > 1
                assert seed_run.data.metrics["target_loss_mean"] == per_seed[name][seed]["target_loss_mean"]
        else:
            assert child.data.metrics["relative_weight_difference/lr_0.001"] == qp["lr=0.001"]["relative_weight_difference"]
    pngs = {a.path.rsplit("/", 1)[-1] for a in c.list_artifacts(parent.info.run_id, "plots") if a.path.endswith(".png")}
    assert pngs == {p.name for p in (dag / "plots" / METHOD).glob("*.png")}
    assert {"target_accuracy.png", "propagated_vs_exact.png", "qp_first_vs_second_order.png"} <= pngs
    assert (dag / "plots" / METHOD / "target_metrics.csv").read_text().startswith("method,")
    assert json.loads((dag / "models" / METHOD / "run.json").read_text())["complete"]


@pytest.mark.dag_stage("influence_distillation")
def test_a_mismatched_selection_is_refused_and_a_killed_run_resumes_to_the_dag_metrics(dag_stage, project, prefect_server):
    expected = json.loads((dag_stage / "results" / f"{METHOD}.json").read_text())
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
    assert not (project / "results" / f"{METHOD}.json").exists()
    assert not json.loads((project / "models" / METHOD / "run.json").read_text())["complete"]
    partial = [load_checkpoint(p)["progress"] for p in (project / "models" / METHOD / "finetune" /
                                                         "exact_first_order").glob("seed*.pt")]
    assert any(p["step"] == 1 and not p["done"] for p in partial)
    run_method(METHOD, "tiny")
    assert json.loads((project / "results" / f"{METHOD}.json").read_text()) == expected
