"""The FVAE-LoRA flow: its outputs in the tiny DAG (a row per variant, the mean and sample std over
seeds, the claims of both modalities, the report's rows, a child MLflow run per variant carrying its
row with a run per seed nested under it, plots, the backbone and per-seed results; the text task's
rows on the tiny lm-base), and a run killed after a seed that resumes to the DAG's metrics."""
from __future__ import annotations

import json
import shutil

import pytest

from flows.launch import run_method
from paperline.methods.fvae_lora import variant
from paperline.methods.fvae_lora.claims import SPECS
from paperline.methods.fvae_lora.config import VARIANTS, TextConfig
from paperline.metrics import validate_metrics
from tasks import track
from tasks.fvae_lora import BACKBONE_FILE
from tests.conftest import finished_flow_runs, report_rows

METHOD = "fvae_lora"
TEXT_VARIANTS = [f"text_{v}" for v in TextConfig().variants]


def test_tiny_dag_outputs(dag):
    path = dag / "results" / f"{METHOD}.json"
    metrics = validate_metrics(json.loads(path.read_text()), str(path))
    assert list(metrics.rows) == list(VARIANTS) + TEXT_VARIANTS and metrics.profile == "tiny"
    assert (metrics.baseline, metrics.primary_metric, metrics.higher_is_better) == ("lora", "worst_group_accuracy", True)
    for v, row in metrics.rows.items():
        assert 0 <= row["worst_group_accuracy"] <= row["accuracy"] <= 1, v
        # the mean over seeds of each seed's worst group: at most the worst of the groups' means
        assert row["worst_group_accuracy"] <= min(row[f"group_y{y}_a{a}"] for y in (0, 1) for a in (0, 1)) + 1e-12
        assert row["worst_group_accuracy_std"] >= 0 and row["seeds"] == 2
    rows = metrics.rows
    assert rows["linear_probe"]["trainable_parameters"] < rows["lora"]["trainable_parameters"]
    assert rows["fvae_lora"]["inference_parameters"] < rows["fvae_lora"]["trainable_parameters"]
    h = metrics.headline
    assert h["worst_group_gain_vs_lora"] == pytest.approx(rows["fvae_lora"]["worst_group_accuracy"]
                                                          - rows["lora"]["worst_group_accuracy"])
    assert not any("claim" in k for k in h)
    names = {c.name for c in metrics.claims}
    assert names == {s.name for s in SPECS}  # tiny runs every variant of both modalities
    assert any(c.trivial for c in metrics.claims)
    assert all(c.seeds == 2 and c.verdict == "inconclusive" for c in metrics.claims)  # two seeds: no verdict
    lora = next(c for c in metrics.claims if c.name == "image_fvae_lora_above_lora_worst_group")
    assert lora.effect == pytest.approx(h["worst_group_gain_vs_lora"])
    assert {"fvae_no_z1_worst_group_vs_fvae_lora", "fvae_m0_worst_group_vs_fvae_lora",
            "fvae_kl10_worst_group_vs_fvae_lora"} <= set(h)
    assert metrics.details["source"] == "digits" and metrics.details["backbone"]["trained_here"]
    # the text task: its claims computed like the image task's, on its own rows; the LM adapters
    # sit on q/v of the tiny lm-base (2 layers): LoRA's weights are 2 layers × 2 × (32 + 32)·r
    assert h["text_worst_group_gain_vs_lora"] == pytest.approx(rows["text_fvae_lora"]["worst_group_accuracy"]
                                                               - rows["text_lora"]["worst_group_accuracy"])
    head = rows["text_linear_probe"]["trainable_parameters"]
    assert rows["text_lora"]["trainable_parameters"] - head == 2 * 2 * (32 + 32) * 2
    text = metrics.details["text"]
    assert text["rows"] == 80 and 0 < text["positive_share"] < 0.5 and text["spurious_token"] < 512
    assert sorted(report_rows(dag, METHOD)) == sorted([*VARIANTS, *TEXT_VARIANTS])

    parent, children = finished_flow_runs(dag, METHOD)
    by_variant = {r.data.tags["variant"]: r for r in children}
    assert set(by_variant) == set(VARIANTS) | set(TEXT_VARIANTS) | {"backbone"}
    for v in [*VARIANTS, *TEXT_VARIANTS]:
        child = by_variant[v].data.metrics
        assert child["worst_group_accuracy"] == rows[v]["worst_group_accuracy"]
        seed_runs = track.client().search_runs([parent.info.experiment_id],
                                               filter_string=f"tags.mlflow.parentRunId = '{by_variant[v].info.run_id}'")
        assert sorted(r.data.tags["variant"] for r in seed_runs) == [f"{v}/seed1", f"{v}/seed2"]
        seed_wg = {r.data.tags["variant"]: r.data.metrics["worst_group_accuracy"] for r in seed_runs}
        assert seed_wg[f"{v}/seed1"] == metrics.tables["seeds"][f"{v} seed1"]["worst_group_accuracy"]
    assert "clean_test_accuracy" in by_variant["backbone"].data.metrics
    assert sorted(p.name for p in (dag / "plots" / METHOD).glob("*.png")) == ["accuracy.png", "losses.png"]
    assert (dag / "plots" / METHOD / "accuracy.csv").read_text().startswith("variant,accuracy,")
    models = dag / "models" / METHOD
    assert (models / "backbone.pt").is_file() and json.loads((models / "run.json").read_text())["complete"]
    assert sorted(p.name for p in (models / "fvae_lora").glob("*.json")) == ["seed1.json", "seed2.json"]
    assert sorted(p.name for p in (models / "text" / "fvae_lora").glob("*.json")) == ["seed1.json", "seed2.json"]


@pytest.mark.dag_stage(METHOD)
def test_a_run_killed_after_a_seed_resumes_to_the_dag_metrics(dag_stage, project, prefect_server):
    expected = json.loads((dag_stage / "results" / f"{METHOD}.json").read_text())
    for folder in ("data/lm_base", "data/text/shakespeare", "data/raw/shakespeare"):  # the text task's inputs
        shutil.copytree(dag_stage / folder, project / folder)
    # the DAG's backbone (reused: same fingerprint), so only the seeds' resume is exercised
    (project / "models" / METHOD).mkdir(parents=True, exist_ok=True)
    shutil.copy2(dag_stage / "models" / METHOD / BACKBONE_FILE, project / "models" / METHOD / BACKBONE_FILE)
    real_adapt = variant.adapt  # patched where the variant run looks it up

    def killed_at_fvae_seed2(cfg, variant, backbone, task, seed, device="cpu"):
        if variant == "fvae_lora" and seed == 2 and task.train_x.ndim == 3:  # the image task's
            raise RuntimeError("killed")
        return real_adapt(cfg, variant, backbone, task, seed, device)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(variant, "adapt", killed_at_fvae_seed2)
        with pytest.raises(Exception, match="^killed$"):
            run_method(METHOD, "tiny")
    done = project / "models" / METHOD / "fvae_lora"
    assert [p.name for p in done.glob("*.json")] == ["seed1.json"]
    assert not (project / "results" / f"{METHOD}.json").exists()
    seed1 = done / "seed1.json"
    written = seed1.stat().st_mtime_ns
    run_method(METHOD, "tiny")
    assert seed1.stat().st_mtime_ns == written  # resumed: the finished seed was not trained again
    got = json.loads((project / "results" / f"{METHOD}.json").read_text())["rows"]
    # Not the DAG's figures: a (variant, seed) trained in another process is not bit-reproducible
    # here (measured at tiny, same backbone: accuracy 0.558 -> 0.519, train accuracy 0.539 -> 0.500),
    # so the resume is checked by the finished seed left untouched above and the rows it completes.
    assert list(got) == list(expected["rows"])  # the text rows too
    for v, row in expected["rows"].items():
        assert all(0 <= got[v][k] <= 1 for k in ("accuracy", "worst_group_accuracy", "train_accuracy")), v
        assert got[v]["trainable_parameters"] == row["trainable_parameters"]  # the same adapters as the DAG's
