"""The Influence Distillation pipeline end to end at the tiny profile: the tulu-pool stage writes the
pool, tulu-select the selected ids of every method, the flow a metrics row per selection method
with the cost ratio and the Spearman correlation, an MLflow parent with one child per selection
method, plots as MLflow artifacts and DVC files. A flow killed mid-fine-tuning resumes to the
metrics of an uninterrupted run; a selection made with other parameters is refused."""
from __future__ import annotations

import json
import shutil

import pytest
import yaml

from flows.__main__ import main as flows_cli
from flows.launch import run_method
from paperline.methods.influence_distillation import pipeline
from paperline.train.checkpoint import load_checkpoint
from tasks import track
from tests.conftest import finished_flow_runs

METHOD = "influence_distillation"


def test_tiny_flow_writes_metrics_plots_selections_and_mlflow_runs(project, prefect_server):
    assert flows_cli(["run", "tulu-pool", "--profile", "tiny"]) == 0
    manifest = json.loads((project / "data" / "tulu" / "manifest.json").read_text())
    assert manifest["pool_size"] == 120 and manifest["skipped"]["skipped"] == 0
    assert flows_cli(["run", "tulu-select", "--profile", "tiny"]) == 0
    run_method(METHOD, "tiny")
    metrics = json.loads((project / "metrics" / f"{METHOD}.json").read_text())
    tiny = yaml.safe_load((project / "params.yaml").read_text())[METHOD]["profiles"]["tiny"]
    methods = ["random", "rds_plus", "exact_first_order", "influence_distillation"]
    for m in methods:
        row = metrics[m]
        for key in ("target_loss_mean", "target_accuracy_mean", "gsm8k_like_loss", "squad_like_token_accuracy",
                    "mmlu_like_choice_accuracy", "selection_wall_s"):
            assert isinstance(row[key], float), (m, key)
    pool = 120
    assert metrics["exact_first_order"]["selection_gradient_evaluations"] == pool + 3 * 4  # pool + targets
    assert metrics["influence_distillation"]["selection_gradient_evaluations"] == tiny["num_landmarks"] + 3 * 4
    assert metrics["cost_ratio_gradient_evaluations"] == (16 + 12) / (120 + 12)
    assert metrics["cost_ratio_wall_time"] > 0
    assert -1 <= metrics["id_vs_exact_spearman_of_target_mean"] <= 1
    assert metrics["qp_relative_weight_difference_smallest_lr"] < metrics["qp_relative_weight_difference_largest_lr"]

    selected = (project / "data" / "tulu" / "selection" / "influence_distillation.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in selected]
    assert len(rows) == tiny["select_k"] and len({r["id"] for r in rows}) == len(rows)
    assert all(r["weight"] == 1.0 for r in rows)

    parent, children = finished_flow_runs(project, METHOD)
    c = track.client()
    assert parent.data.tags["data_version"].startswith("sha256:")
    assert sorted(r.data.tags["variant"] for r in children) == sorted(methods)
    assert all(r.info.status == "FINISHED" for r in children)
    pngs = {a.path.rsplit("/", 1)[-1] for a in c.list_artifacts(parent.info.run_id, "plots") if a.path.endswith(".png")}
    assert pngs == {p.name for p in (project / "plots" / METHOD).glob("*.png")}
    assert {"target_accuracy.png", "propagated_vs_exact.png", "qp_first_vs_second_order.png"} <= pngs
    assert (project / "plots" / METHOD / "target_metrics.csv").read_text().startswith("method,")
    assert json.loads((project / "models" / METHOD / "run.json").read_text())["complete"]

    # killed in the middle of one fine-tuning (after its first checkpoint), then run again
    shutil.rmtree(project / "models" / METHOD)
    (project / "metrics" / f"{METHOD}.json").unlink()
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
    partial = load_checkpoint(project / "models" / METHOD / "finetune" / "exact_first_order.pt")
    assert partial["step"] == 1 and not partial["done"]
    run_method(METHOD, "tiny")
    assert json.loads((project / "metrics" / f"{METHOD}.json").read_text()) == metrics

    # a selection made with other parameters than the flow's is refused, naming the key
    with pytest.raises(ValueError, match="select_k"):
        run_method(METHOD, "tiny", ["select_k=5"])
