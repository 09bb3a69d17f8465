"""The SUMO flow end to end at the tiny profile: a metrics row per optimizer, an MLflow parent with
a child per (optimizer, lr) and one for the step times, plots as MLflow artifacts and DVC files,
the same metrics from the same seed (timings aside)."""
from __future__ import annotations

import json

import yaml

from flows.launch import run_method
from tasks import track
from tests.conftest import finished_flow_runs

TIMING_KEYS = {"step_ms", "step_time_vs_adamw", "optimizer_time_vs_adamw"}


def _run(project) -> dict:
    run_method("sumo", "tiny")
    return json.loads((project / "metrics" / "sumo.json").read_text())


def _without_timings(metrics: dict) -> dict:
    return {k: ({c: v for c, v in row.items() if c not in TIMING_KEYS} if isinstance(row, dict) else row)
            for k, row in metrics.items()}


def test_tiny_flow_writes_metrics_plots_and_mlflow_runs(project, prefect_server):
    metrics = _run(project)
    tiny = yaml.safe_load((project / "params.yaml").read_text())["sumo"]["profiles"]["tiny"]
    rows = {k: v for k, v in metrics.items() if isinstance(v, dict)}
    assert sorted(rows) == sorted(tiny["optimizers"])
    for name, row in rows.items():
        assert row["best_lr"] in tiny["lr_grid"][name]
        assert row["state_floats"] == row["state_floats_formula"]
        for key in ("final_train_loss", "mean_train_loss", "test_accuracy", "state_bytes_vs_adamw",
                    "step_time_vs_adamw"):
            assert isinstance(row[key], float), (name, key)
    assert rows["adamw"]["step_time_vs_adamw"] == 1.0
    assert rows["sumo"]["state_bytes"] < rows["galore_adamw"]["state_bytes"] < rows["adamw"]["state_bytes"]
    assert metrics["ns5_error_at_kappa_1e6"] > metrics["ns5_error_at_kappa_1"]

    parent, children = finished_flow_runs(project, "sumo")
    c = track.client()
    assert parent.data.tags["data_version"].startswith("sha256:")
    variants = [f"{n}_lr{lr:g}" for n in tiny["optimizers"] for lr in tiny["lr_grid"][n]]
    assert sorted(r.data.tags["variant"] for r in children) == sorted(variants + ["step_time"])
    assert all(r.info.status == "FINISHED" for r in children)
    sumo_child = next(r for r in children if r.data.tags["variant"].startswith("sumo_lr"))
    curve = c.get_metric_history(sumo_child.info.run_id, "train_loss/seed0")
    assert len(curve) > 2 and curve[-1].value < curve[0].value
    assert any(a.path.endswith(".pt") for a in c.list_artifacts(sumo_child.info.run_id, "checkpoints"))
    pngs = [a.path.rsplit("/", 1)[-1] for a in c.list_artifacts(parent.info.run_id, "plots")
            if a.path.endswith(".png")]
    assert sorted(pngs) == sorted(p.name for p in (project / "plots" / "sumo").glob("*.png"))
    assert {"loss_curves.png", "ns_error_vs_kappa.png", "lr_sweep.png", "state_and_step_time.png"} <= set(pngs)
    assert (project / "plots" / "sumo" / "loss_curves.csv").read_text().startswith("step,")
    assert json.loads((project / "models" / "sumo" / "run.json").read_text())["complete"]

    again = _run(project)  # a completed run is not resumed: this trains again from scratch
    assert _without_timings(again) == _without_timings(metrics)


def test_llama_c4_path_runs_by_path_through_the_flow(project, prefect_server):
    """The paper profile's task (LLaMA on C4) through the same flow, on C4-format files written here."""
    from paperline.data.c4 import write_c4_shard, write_word_level_tokenizer

    words = "the a model learns low rank moment subspace optimizer gradient step loss".split()
    texts = [" ".join(words[(i + j) % len(words)] for j in range(5 + i % 20)) for i in range(200)]
    c4 = project / "c4"
    write_c4_shard(c4 / "c4-train.00000-of-01024.json.gz", texts)
    write_c4_shard(c4 / "c4-validation.00000-of-00008.json.gz", texts[::7])
    write_word_level_tokenizer(c4 / "tokenizer.json", texts)
    overrides = ["task=llama_c4", "optimizers=[adamw, sumo]", "seeds=1", "steps=6", "batch_size=8",
                 "adamw_part_lr=null", "lm.model_size=tiny", "lm.c4_dir=c4", "lm.tokenizer=c4/tokenizer.json",
                 "lm.max_length=24", "lm.micro_batch_size=4", "lm.dtype=float32", "lm.eval_every=3",
                 "lm.eval_tokens=200", "lm.shuffle_buffer=20"]  # relative paths: to the project root
    run_method("sumo", "tiny", overrides)
    metrics = json.loads((project / "metrics" / "sumo.json").read_text())
    assert sorted(k for k, v in metrics.items() if isinstance(v, dict)) == ["adamw", "sumo"]
    for row in (metrics["adamw"], metrics["sumo"]):
        assert row["val_perplexity"] > 1 and row["state_floats"] == row["state_floats_formula"]
    assert metrics["sumo"]["state_bytes_vs_adamw"] < 1
    pointer = json.loads((project / "runs" / "sumo" / "mlflow_run.json").read_text())
    parent = track.client().get_run(pointer["run_id"])
    assert parent.data.tags["data_version"].startswith("c4-sha256:")


def test_a_missing_c4_folder_or_tokenizer_is_named_before_any_work(project, tmp_path):
    import pytest

    from paperline.methods.sumo.config import SumoConfig
    from tasks.sumo import data_version, with_resolved_paths

    lm = {"model_size": "tiny", "c4_dir": "no/c4", "tokenizer": "no/tokenizer.json", "micro_batch_size": 8,
          "max_length": 32}
    cfg = with_resolved_paths(SumoConfig(task="llama_c4", lm=lm, optimizers=["adamw"], lr_grid={"adamw": [1e-3]},
                                         batch_size=8, rank=4))
    assert cfg.lm.c4_dir == str(project / "no" / "c4")
    with pytest.raises(FileNotFoundError, match="no/c4: no such C4 folder"):
        data_version(cfg)
