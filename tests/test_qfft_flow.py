"""The QFFT flow's outputs in the tiny DAG: base and four fine-tunes per seed (one MLflow child per
model with the mean row on it, a run per seed under it with the seed's row), results/qfft.json
with accuracy / length / long-CoT rate on easy and hard questions, RAK and AES for each against SFT
(means and spreads over the seeds), loadable HF models and saved responses; a malformed JSONL line fails
before training."""
from __future__ import annotations

import json

import numpy as np
import pytest

from paperline.methods.qfft.claims import SPECS
from paperline.metrics import validate_metrics
from tasks import track
from tasks.publish import claim_metrics
from tests.conftest import finished_flow_runs, report_rows

MODELS = ["base", "sft", "qfft", "sft_noise_iv", "qfft_noise_iv"]
SEEDS = [0, 1]  # the tiny profile's seeds


def test_tiny_dag_outputs(dag):
    path = dag / "results" / "qfft.json"
    metrics = validate_metrics(json.loads(path.read_text()), str(path))
    assert sorted(metrics.rows) == sorted(report_rows(dag, "qfft")) == sorted(MODELS)
    assert (metrics.profile, metrics.baseline, metrics.primary_metric, metrics.higher_is_better) == \
        ("tiny", "sft", "all_accuracy", True)
    questions = metrics.headline["questions"]
    assert metrics.headline["seeds"] == len(SEEDS)
    per_seed = metrics.tables["seeds"]
    assert sorted(per_seed) == sorted(f"{m}_s{s}" for m in MODELS for s in SEEDS)
    for name, row in metrics.rows.items():
        assert row["seeds"] == len(SEEDS)
        assert row["questions_easy"] + row["questions_hard"] == pytest.approx(questions)
        assert 0 <= row["all_accuracy"] <= 1 and 0 <= row["all_long_cot_rate"] <= 1 and row["all_mean_length"] >= 0
        assert -1 <= row["rak"] <= 1
        accuracies = []
        for seed in SEEDS:  # every seed's responses saved, its row scored from them
            own = per_seed[f"{name}_s{seed}"]
            responses = [json.loads(line) for line in
                         (dag / "models" / "qfft" / name / f"seed{seed}" / "responses.jsonl").read_text().splitlines()]
            assert len(responses) == questions
            assert own["all_accuracy"] == pytest.approx(sum(r["correct"] for r in responses) / questions)
            accuracies.append(own["all_accuracy"])
        # the row: the mean over seeds and its spread
        assert row["all_accuracy"] == pytest.approx(float(np.mean(accuracies)))
        assert row["all_accuracy_std"] == pytest.approx(float(np.std(accuracies, ddof=1)))  # the sample std
    for seed in SEEDS:  # easy = this seed's base answered correctly: 1 on easy, 0 on hard by definition
        base = per_seed[f"base_s{seed}"]
        assert base.get("easy_accuracy", 1.0) == 1.0 and base.get("hard_accuracy", 0.0) == 0.0
    assert metrics.headline["base_accuracy"] == metrics.rows["base"]["all_accuracy"]
    assert metrics.headline["qfft_minus_sft_rak"] == pytest.approx(metrics.rows["qfft"]["rak"] - metrics.rows["sft"]["rak"])
    # the claims, paired by seed: every one declared, one against the base, two seeds decide nothing
    assert metrics.claims and {c.name for c in metrics.claims} <= {s.name for s in SPECS}
    assert any(c.trivial and c.versus == "base" for c in metrics.claims)
    assert all(c.seeds <= len(SEEDS) and c.verdict == "inconclusive" for c in metrics.claims)

    parent, children = finished_flow_runs(dag, "qfft")
    assert sorted(r.data.tags["variant"] for r in children) == sorted(MODELS)
    assert all(r.info.status == "FINISHED" for r in children)
    # the headline figures and each claim's effect and interval, no per-model values
    assert parent.data.metrics == {k: float(v) for k, v in metrics.headline.items()} | claim_metrics(metrics.claims)
    client = track.client()
    for child in children:  # the means on each model's run, each seed's own row on a run under it
        name = child.data.tags["variant"]
        row = metrics.rows[name]
        assert {k: child.data.metrics[k] for k in row} == row
        assert "rak" in child.data.metrics and "all_accuracy" in child.data.metrics
        seeds = client.search_runs([parent.info.experiment_id],
                                   filter_string=f"tags.mlflow.parentRunId = '{child.info.run_id}'")
        assert sorted(r.info.run_name for r in seeds) == sorted(f"{name}_s{s}" for s in SEEDS)
        for r in seeds:
            assert r.info.status == "FINISHED"
            assert {k: r.data.metrics[k] for k in per_seed[r.info.run_name]} == per_seed[r.info.run_name]
    arts = {a.path.rsplit("/", 1)[-1] for a in track.client().list_artifacts(parent.info.run_id, "plots")}
    assert {"qfft_comparison.png", "qfft_comparison.csv"} <= arts

    from transformers import AutoModelForCausalLM

    import paperline.nn.causal_lm  # noqa: F401  (registers the model type with the Auto classes)

    model = AutoModelForCausalLM.from_pretrained(dag / "models" / "qfft" / "qfft" / "seed1" / "hf")
    assert model.config.model_type == "paperline_causal_lm"  # the tiny profile's LoRA merged: a plain model
    # the tiny profile's first_pass: base — the fine-tuning responses start from the base's answers
    from paperline.methods.qfft.metrics import extract_answer

    for seed in SEEDS:  # each seed's fine-tuning set from its own base
        finetune = [json.loads(line) for line in
                    (dag / "models" / "qfft" / "data" / f"seed{seed}" / "finetune.jsonl").read_text().splitlines()]
        assert finetune and all(extract_answer(e["response"]) == e["answer"] for e in finetune)
        assert all(e["response"].count("Wait, recheck:") <= 1 for e in finetune)
    assert json.loads((dag / "models" / "qfft" / "run.json").read_text())["complete"]


def test_a_malformed_finetune_jsonl_fails_before_training_naming_the_file_and_line(project):
    from flows.launch import resolve
    from paperline.methods.qfft.data import QFFTDataError
    from tasks.qfft import data

    (project / "eval.jsonl").write_text(json.dumps({"question": "1+1", "solution": "2", "answer": "2"}) + "\n")
    bad = project / "limo.jsonl"
    bad.write_text(json.dumps({"question": "q", "solution": "s", "answer": "1"}) + "\n" + '{"question": "q"}\n')
    # relative paths: relative to the project root
    _, cfg = resolve("qfft", "tiny", ["real_data.finetune_jsonl=limo.jsonl", "real_data.eval_jsonl=eval.jsonl",
                                      "base_model_path=no-model", "problems.first_pass=teacher"])
    with pytest.raises(QFFTDataError, match=r"limo.jsonl: line 2: missing field 'solution'"):
        data(cfg)
    assert not (project / "models" / "qfft" / "base").exists()


def test_an_unknown_parameter_is_named(project):
    from flows.launch import resolve
    from paperline.config import ParamsError

    with pytest.raises(ParamsError, match="finetune.stepz"):
        resolve("qfft", "tiny", ["finetune.stepz=3"])
    with pytest.raises(ParamsError, match="problems.first_pass: 'base' builds generated chain-sum responses"):
        resolve("qfft", "tiny", ["real_data.finetune_jsonl=a.jsonl", "real_data.eval_jsonl=b.jsonl",
                                 "base_model_path=no-model"])
