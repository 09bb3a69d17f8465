"""The SUMO flow: its outputs in the tiny DAG (a row per optimizer at its best lr, on that
optimizer's MLflow run with its lr runs and their seed runs nested under it, the initial model's
row, the step-time run, plots as MLflow artifacts and DVC files, the claims); the same seed gives
the DAG's metrics again (one optimizer, timings aside); the paper's LLaMA-on-C4 task through the
same flow, and a missing C4 folder named first."""
from __future__ import annotations

import json
import shutil

import pytest
import yaml

from flows.launch import resolve, run_method
from paperline.data.text_corpus import CorpusError
from paperline.methods.sumo.claims import INITIAL, SPECS
from paperline.metrics import validate_metrics
from tasks import track
from tasks.sumo import data_version
from tests.conftest import finished_flow_runs, report_rows

TIMING_KEYS = {"step_ms", "step_time_vs_adamw", "optimizer_time_vs_adamw", "run_step_ms"}


def _tiny(project) -> dict:
    return yaml.safe_load((project / "params" / "sumo.yaml").read_text())["sumo"]["profiles"]["tiny"]


def _metrics(project):
    path = project / "results" / "sumo.json"
    return validate_metrics(json.loads(path.read_text()), str(path))


def test_tiny_dag_outputs(dag):
    metrics, tiny = _metrics(dag), _tiny(dag)
    assert sorted(metrics.rows) == sorted([*tiny["optimizers"], INITIAL]) == sorted(report_rows(dag, "sumo"))
    assert (metrics.baseline, metrics.primary_metric, metrics.higher_is_better) == ("galore_adamw", "mean_train_loss",
                                                                                   False)
    rows = {name: row for name, row in metrics.rows.items() if name != INITIAL}
    for name, row in rows.items():
        assert row["best_lr"] in tiny["lr_grid"][name]
        assert row["state_floats"] == row["state_floats_formula"]
        for key in ("final_train_loss", "mean_train_loss", "test_accuracy", "state_bytes_vs_adamw",
                    "step_time_vs_adamw"):
            assert isinstance(row[key], float), (name, key)
        assert row["seeds"] == len(tiny["seeds"]) and row["tuning"] == f"lr grid of {len(tiny['lr_grid'][name])} at every seed"
    # the trivial baseline: each seed's initial model, scored as the trained ones
    assert metrics.rows[INITIAL]["seeds"] == len(tiny["seeds"]) and metrics.rows[INITIAL]["test_loss"] > rows["sumo"]["test_loss"]
    claims = {c.name: c for c in metrics.claims}
    assert set(claims) <= {s.name for s in SPECS} and any(c.trivial for c in claims.values())
    assert {"sumo_below_galore_train_loss", "sumo_svd_below_ns_train_loss", "sumo_below_initial_test_loss",
            "lm_sumo_below_adamw_val_loss", "lm_sumo_below_initial_val_loss"} == set(claims)
    assert all(c.seeds == 2 and c.verdict == "inconclusive" for c in claims.values())  # 2 seeds at tiny
    assert rows["adamw"]["step_time_vs_adamw"] == 1.0
    assert rows["sumo"]["state_bytes"] < rows["galore_adamw"]["state_bytes"] < rows["adamw"]["state_bytes"]
    assert metrics.headline["sumo_over_galore_mean_train_loss"] == pytest.approx(
        rows["sumo"]["mean_train_loss"] / rows["galore_adamw"]["mean_train_loss"])
    assert metrics.headline["ns5_error_at_kappa_1e6"] > metrics.headline["ns5_error_at_kappa_1"]
    assert list(metrics.tables["newton_schulz_vs_svd"]) == ["kappa_1", "kappa_1000", "kappa_1e6"]
    assert sorted(metrics.details["by_lr"]["adamw"]) == ["0.001", "0.01"]

    parent, children = finished_flow_runs(dag, "sumo")
    c = track.client()
    assert parent.data.tags["data_version"].startswith("sha256:")
    assert not any("/" in k for k in parent.data.metrics)  # headline figures only
    by_variant = {r.data.tags["variant"]: r for r in children}
    assert sorted(by_variant) == sorted([*tiny["optimizers"], "step_time", "text_lm", INITIAL])
    assert all(r.info.status == "FINISHED" for r in children)
    for name, row in rows.items():  # each optimizer's run carries its row, under the same names
        assert by_variant[name].data.metrics["mean_train_loss"] == row["mean_train_loss"]
        assert by_variant[name].data.metrics["best_lr"] == row["best_lr"]
    nested = c.search_runs([parent.info.experiment_id],
                           filter_string=f"tags.mlflow.parentRunId = '{by_variant['adamw'].info.run_id}'")
    assert sorted(r.data.tags["variant"] for r in nested) == ["adamw_lr0.001", "adamw_lr0.01"]
    lr_run = next(r for r in nested if r.data.tags["variant"] == "adamw_lr0.01")
    seed_runs = {r.data.tags["variant"]: r for r in c.search_runs(
        [parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{lr_run.info.run_id}'")}
    assert sorted(seed_runs) == [f"adamw_lr0.01/seed{s}" for s in tiny["seeds"]]
    curve = c.get_metric_history(seed_runs["adamw_lr0.01/seed0"].info.run_id, "train_loss")
    assert len(curve) > 2 and curve[-1].value < curve[0].value
    assert any(a.path.endswith(".pt") for a in c.list_artifacts(lr_run.info.run_id, "checkpoints"))
    pngs = [a.path.rsplit("/", 1)[-1] for a in c.list_artifacts(parent.info.run_id, "plots")
            if a.path.endswith(".png")]
    assert sorted(pngs) == sorted(p.name for p in (dag / "plots" / "sumo").glob("*.png"))
    assert {"loss_curves.png", "ns_error_vs_kappa.png", "lr_sweep.png", "state_and_step_time.png"} <= set(pngs)
    assert (dag / "plots" / "sumo" / "loss_curves.csv").read_text().startswith("step,")
    assert json.loads((dag / "models" / "sumo" / "run.json").read_text())["complete"]


def test_tiny_dag_text_lm_rows(dag):
    """The causal-LM task: a row per optimizer of text_lm at its best lr (picked at seed 0, the
    mean over every seed), the initial model's row, held-out loss and state bytes measured =
    formula, SUMO's moment condition numbers, the headline's ratios, each (optimizer, lr) run nested
    under text_lm with its seeds' runs (loss per step and κ curves) under it, the plots."""
    metrics, t = _metrics(dag), _tiny(dag)["text_lm"]
    rows = metrics.tables["text_lm"]
    assert sorted(rows) == sorted([*t["optimizers"], INITIAL])
    assert rows[INITIAL]["seeds"] == len(t["seeds"]) and rows[INITIAL]["test_loss"] > rows["sumo"]["test_loss"]
    rows = {name: row for name, row in rows.items() if name != INITIAL}
    for name, row in rows.items():
        assert row["best_lr"] in t["lr_grid"][name] and isinstance(row["test_loss"], float), name
        assert row["state_floats"] == row["state_floats_formula"] and row["seeds"] == len(t["seeds"])
    assert rows["sumo"]["state_bytes"] < rows["adamw"]["state_bytes"]
    assert 1 <= rows["sumo"]["moment_condition_median"] <= rows["sumo"]["moment_condition_max"]
    lm_claim = next(c for c in metrics.claims if c.name == "lm_sumo_below_adamw_val_loss")
    assert lm_claim.effect == pytest.approx(rows["sumo"]["test_loss"] - rows["adamw"]["test_loss"])
    assert metrics.headline["lm_sumo_over_adamw_val_loss"] == pytest.approx(
        rows["sumo"]["test_loss"] / rows["adamw"]["test_loss"])

    parent, children = finished_flow_runs(dag, "sumo")
    c = track.client()
    lm_run = next(r for r in children if r.data.tags["variant"] == "text_lm")
    assert lm_run.data.metrics["sumo/test_loss"] == rows["sumo"]["test_loss"]
    nested = {r.data.tags["variant"]: r for r in c.search_runs(
        [parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{lm_run.info.run_id}'")}
    assert sorted(nested) == sorted(f"lm_{n}_lr{lr:g}" for n in t["optimizers"] for lr in t["lr_grid"][n])
    sumo_lr = f"lm_sumo_lr{t['lr_grid']['sumo'][0]:g}"
    seed_runs = {r.data.tags["variant"]: r for r in c.search_runs(
        [parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{nested[sumo_lr].info.run_id}'")}
    assert sorted(seed_runs) == [f"{sumo_lr}/seed{s}" for s in t["seeds"]]
    sumo_run = seed_runs[f"{sumo_lr}/seed0"]
    kappa = c.get_metric_history(sumo_run.info.run_id, "moment_condition_max")
    assert [m.step for m in kappa] == list(range(t["condition_every"], t["steps"] + 1, t["condition_every"]))
    assert len(c.get_metric_history(sumo_run.info.run_id, "train_loss")) == t["steps"] // t["log_every"]
    assert {"lm_loss_curves.png", "lm_lr_sweep.png", "lm_moment_condition.png"} <= {
        p.name for p in (dag / "plots" / "sumo").glob("*.png")}
    assert (dag / "plots" / "sumo" / "lm_loss_curves.csv").read_text().startswith("step,")


@pytest.mark.dag_stage("sumo")
def test_the_same_seed_gives_the_dag_metrics_again(dag_stage, project, prefect_server):
    """AdamW alone on digits (its whole lr grid), against the DAG's record: every number but the
    timings and the ratio to the baseline (GaLore's in the DAG, AdamW's own here); the theory check
    and the causal-LM task (run whole again) likewise."""
    expected = _metrics(dag_stage)
    shutil.copytree(dag_stage / "data" / "text" / "shakespeare", project / "data" / "text" / "shakespeare")

    def comparable(row):
        return {k: v for k, v in row.items() if k not in TIMING_KEYS and not k.endswith("_vs_baseline")}

    run_method("sumo", "tiny", ["optimizers=[adamw]"])
    again = _metrics(project)
    assert comparable(again.rows["adamw"]) == comparable(expected.rows["adamw"])
    assert again.details["by_lr"]["adamw"] == expected.details["by_lr"]["adamw"]
    # the theory check: the same seed, the same moments; the LM task: the same runs
    assert again.tables["newton_schulz_vs_svd"] == expected.tables["newton_schulz_vs_svd"]
    assert ({n: comparable(r) for n, r in again.tables["text_lm"].items()}
            == {n: comparable(r) for n, r in expected.tables["text_lm"].items()})


def test_a_missing_corpus_is_named_before_training(project):
    _, cfg = resolve("sumo", "tiny", ["text_lm.corpus=nowhere"])
    with pytest.raises(CorpusError, match=f"{project / 'nowhere'}/train.bin: missing"):
        data_version(cfg)


def test_llama_c4_path_runs_by_path_through_the_flow(project, prefect_server):
    """The paper profile's task (LLaMA on C4) through the same flow, on C4-format files written here;
    before they exist, the flow's data check names the missing folder, then the tokenizer."""
    from paperline.data.c4 import write_c4_shard, write_word_level_tokenizer

    overrides = ["task=llama_c4", "text_lm=null", "optimizers=[adamw, sumo]", "seeds=[0]", "steps=6", "batch_size=8",
                 "adamw_part_lr=null", "lm.model_size=tiny", "lm.c4_dir=c4", "lm.tokenizer=c4/tokenizer.json",
                 "lm.max_length=24", "lm.micro_batch_size=4", "lm.dtype=float32", "lm.eval_every=3",
                 "lm.eval_tokens=200", "lm.shuffle_buffer=20"]  # relative paths: to the project root
    _, cfg = resolve("sumo", "tiny", overrides)
    with pytest.raises(FileNotFoundError, match=f"{project / 'c4'}: no such C4 folder"):
        data_version(cfg)  # what the flow checks first

    words = "the a model learns low rank moment subspace optimizer gradient step loss".split()
    texts = [" ".join(words[(i + j) % len(words)] for j in range(5 + i % 20)) for i in range(200)]
    c4 = project / "c4"
    write_c4_shard(c4 / "c4-train.00000-of-01024.json.gz", texts)
    write_c4_shard(c4 / "c4-validation.00000-of-00008.json.gz", texts[::7])
    with pytest.raises(FileNotFoundError, match="tokenizer.json: no such tokenizer file"):
        data_version(cfg)
    write_word_level_tokenizer(c4 / "tokenizer.json", texts)
    run_method("sumo", "tiny", overrides)
    metrics = _metrics(project)
    assert sorted(metrics.rows) == ["adamw", "sumo"] and metrics.baseline == "adamw"
    for row in metrics.rows.values():
        assert row["val_perplexity"] > 1 and row["state_floats"] == row["state_floats_formula"]
    assert metrics.rows["sumo"]["state_bytes_vs_adamw"] < 1
    parent, _ = finished_flow_runs(project, "sumo")
    assert parent.data.tags["data_version"].startswith("c4-sha256:")
