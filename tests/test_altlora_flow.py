"""The AltLoRA flow: its outputs in the tiny DAG (a row per optimizer, on that optimizer's MLflow run
with its linear runs nested under it, the step-time run, plots as MLflow artifacts and DVC files,
state floats equal to the spec's formulas); the same seed gives the DAG's numbers again; a bad
parameter fails before any work, naming the key."""
from __future__ import annotations

import json
import shutil

import pytest
import yaml

from flows.launch import resolve, run_method
from paperline.config import ParamsError
from paperline.methods.altlora.claims import NO_ADAPTATION, SPECS
from paperline.methods.altlora.config import AltLoRAConfig
from paperline.metrics import validate_metrics
from paperline.train.lm_base import ModelDirError
from tasks import track
from tasks.altlora import data_version
from tasks.runners import ensure_gpu_limit
from tests.conftest import finished_flow_runs, report_rows

TIMING_KEYS = {"step_ms", "step_time_vs_lora_adamw"}


def _tiny(project) -> dict:
    return yaml.safe_load((project / "params" / "altlora.yaml").read_text())["altlora"]["profiles"]["tiny"]


def _metrics(project):
    path = project / "results" / "altlora.json"
    return validate_metrics(json.loads(path.read_text()), str(path))


def test_tiny_dag_outputs(dag):
    metrics, tiny = _metrics(dag), _tiny(dag)
    assert sorted(metrics.rows) == sorted([*tiny["optimizers"], NO_ADAPTATION]) == sorted(report_rows(dag, "altlora"))
    assert (metrics.baseline, metrics.primary_metric, metrics.higher_is_better) == ("lora_adamw", "final_error", False)
    seeds = len(tiny["seeds"])
    untouched = metrics.rows[NO_ADAPTATION]  # W₀ itself: ΔW = 0, scored as every run
    assert untouched["seeds"] == seeds and untouched["relative_error"] == 1.0
    rows = {name: row for name, row in metrics.rows.items() if name != NO_ADAPTATION}
    for name, row in rows.items():
        assert row["best_lr"] in tiny["linear"]["lr_grid"][name] and row["seeds"] == seeds
        assert row["final_error"] < untouched["final_error"], name
        assert row["state_floats"] == row["state_floats_formula"]
        for key in ("final_error", "final_loss", "c_spread", "step_time_vs_lora_adamw"):
            assert isinstance(row[key], float), (name, key)
    n, r = tiny["linear"]["dim"], tiny["linear"]["ranks"][0]
    assert rows["altlora"]["state_floats"] == rows["lora_adamw"]["state_floats"] == 2 * (n + n) * r
    assert rows["altlora_plus"]["state_floats"] == 3 * (n + n) * r
    assert rows["lora_pro"]["state_floats"] == rows["full_ft"]["state_floats"] == 2 * n * n
    assert rows["scaledgd"]["state_floats"] == 0 and rows["lora_adamw"]["step_time_vs_lora_adamw"] == 1.0
    assert rows["full_ft"]["c_spread"] == 1.0  # no factors to rescale
    # the reparameterisation invariance, and its absence under Adam, even in 40 steps
    assert rows["scaledgd"]["c_spread"] < 1.05 < rows["lora_adamw"]["c_spread"]
    assert metrics.headline["altlora_over_lora_adamw_final_error"] == pytest.approx(
        rows["altlora"]["final_error"] / rows["lora_adamw"]["final_error"])
    claims = {c.name: c for c in metrics.claims}
    assert set(claims) == {s.name for s in SPECS} and claims["altlora_below_no_adaptation_error"].trivial
    assert all(c.seeds == seeds for c in claims.values())  # the LM runs too: the best lr at every seed
    assert claims["altlora_below_lora_adamw_error"].effect == pytest.approx(
        rows["altlora"]["final_error"] - rows["lora_adamw"]["final_error"])
    assert all(c.verdict == "inconclusive" for c in claims.values())  # fewer than 3 seeds at tiny
    # the LM adaptation of the tiny lm-base: its optimizers only, the base's losses beside them
    for name, row in rows.items():
        assert (row.get("lm_val_loss") is not None) == (name in tiny["lm"]["optimizers"]), name
        assert row.get("lm_seeds", seeds) == seeds, name
    assert rows["altlora"]["lm_val_loss"] < metrics.details["lm_base"]["base_target_val_loss"] == untouched["lm_val_loss"]
    assert metrics.headline["altlora_over_lora_adamw_lm_val_loss"] == pytest.approx(
        rows["altlora"]["lm_val_loss"] / rows["lora_adamw"]["lm_val_loss"])

    parent, children = finished_flow_runs(dag, "altlora")
    c = track.client()
    assert parent.data.tags["data_version"].startswith("sha256:")  # the base, the corpus, the KJV slice
    by_variant = {run.data.tags["variant"]: run for run in children}
    assert sorted(by_variant) == sorted([*tiny["optimizers"], "step_time", NO_ADAPTATION])
    lm_runs = c.search_runs([parent.info.experiment_id],
                            filter_string=f"tags.mlflow.parentRunId = '{by_variant['lora_adamw'].info.run_id}'")
    assert "lora_adamw_lm_lr0.01" in {run.data.tags["variant"] for run in lm_runs}
    for name, row in rows.items():
        assert by_variant[name].data.metrics["final_error"] == row["final_error"]
    nested = c.search_runs([parent.info.experiment_id],
                           filter_string=f"tags.mlflow.parentRunId = '{by_variant['altlora'].info.run_id}'")
    assert sorted(run.data.tags["variant"] for run in nested) == [
        *(f"altlora_linear_r{r}/seed{s}" for s in range(seeds)), "altlora_lm_lr0.1",
        *(f"altlora_lm_lr0.1/seed{s}" for s in range(1, seeds))]
    linear_run = next(run for run in nested if run.data.tags["variant"] == f"altlora_linear_r{r}/seed0")
    curve = c.get_metric_history(linear_run.info.run_id, "error/c1_lr0.1")
    assert len(curve) == tiny["linear"]["steps"] // tiny["linear"]["log_every"] + 1
    assert curve[-1].value < curve[0].value
    pngs = {a.path.rsplit("/", 1)[-1] for a in c.list_artifacts(parent.info.run_id, "plots")}
    assert {"error_curves.png", "rescaling_curves.png", "state_and_step_time.png"} <= pngs
    assert (dag / "plots" / "altlora" / "error_curves.csv").read_text().startswith("step,")
    assert json.loads((dag / "models" / "altlora" / "run.json").read_text())["complete"]


@pytest.mark.dag_stage("altlora")
def test_the_same_seed_gives_the_dag_numbers_again(dag_stage, project, prefect_server):
    """LoRA-AdamW and AltLoRA alone, against the DAG's record: every number but the timings (the LM
    runs too: the same base, seed and batches)."""
    expected = _metrics(dag_stage)
    for folder in ("data/lm_base", "data/text/shakespeare", "data/raw/kjv"):  # the DAG's inputs
        shutil.copytree(dag_stage / folder, project / folder)
    run_method("altlora", "tiny", ["optimizers=[lora_adamw, altlora]"])
    again = _metrics(project)
    for name in ("lora_adamw", "altlora"):
        same = {k: v for k, v in again.rows[name].items() if k not in TIMING_KEYS and "timing" not in k}
        assert same == {k: v for k, v in expected.rows[name].items() if k in same}


def test_bad_parameters_fail_before_any_work(project, tmp_path):
    with pytest.raises(ParamsError, match=r"altlora.profiles.tiny.linear.lr_grid.nadam.\[key\]: Input should be 'lora_adamw'"):
        resolve("altlora", "tiny", ["linear.lr_grid.nadam=[0.1]"])
    with pytest.raises(ParamsError, match=r"linear.ranks \[32\] exceed linear.dim 16"):
        resolve("altlora", "tiny", ["linear.ranks=[32]"])
    with pytest.raises(ParamsError, match=r"optimizers must include lora_adamw"):
        resolve("altlora", "tiny", ["optimizers=[altlora]"])
    _, cfg = resolve("altlora", "tiny", [f"lm.base={tmp_path}"])
    with pytest.raises(ModelDirError, match=f"{tmp_path}: not a transformers model directory"):
        data_version(cfg)  # what the flow checks first
    assert not (project / "models" / "altlora").exists()


# A finished linear run in the run directory is read back by a resumed task, not retrained, and its
# curves are logged on the resumed run's MLflow runs as a trained one's are.
def test_a_finished_linear_run_is_read_back_and_logged_again(project, prefect_server, monkeypatch):
    from tasks import altlora

    cfg = AltLoRAConfig(optimizers=["lora_adamw"], seeds=[0], linear={
        "dim": 8, "singular_values": [1.0], "ranks": [2], "scales": [1.0], "steps": 4, "batch_size": 8,
        "eval_samples": 16, "log_every": 2, "lr_grid": {"lora_adamw": [1e-2, 3e-2]}})
    ensure_gpu_limit()

    def linear_runs(cfg):
        with track.parent_run("altlora", "tiny", {}, "generated") as parent:
            ctx = track.RunContext("altlora", "tiny", "generated", parent)
            with altlora.optimizer_runs(cfg, ctx) as runs:
                return altlora.linear_variant.fn(cfg, "lora_adamw", ctx, runs["lora_adamw"]), parent

    first, _ = linear_runs(cfg)
    records = sorted(p.name for p in (project / "models" / "altlora" / "linear" / "lora_adamw").glob("*.json"))
    assert records == ["r2_c1_lr0.01.json", "r2_c1_lr0.03.json"]

    def retrained(*args, **kwargs):
        raise AssertionError("retrained")

    monkeypatch.setattr(altlora, "train_linear", retrained)
    again, parent = linear_runs(cfg)
    assert again == first
    client = track.client()
    (seed0,) = [r for r in client.search_runs([parent.experiment_id])
                if r.data.tags.get("mlflow.parentRunId") == track.child_runs(parent)["lora_adamw"]]
    history = sorted(client.get_metric_history(seed0.info.run_id, "error/c1_lr0.01"), key=lambda m: m.step)
    assert [m.value for m in history] == pytest.approx(first[0]["history"]["error"])
    with pytest.raises(AssertionError, match="retrained"):  # a record of other settings is not read back
        linear_runs(cfg.model_copy(update={"settings": cfg.settings.model_copy(update={"reg": 1e-3})}))
