"""The QFFT flow end to end at the tiny profile: base and four fine-tunes (one MLflow child each),
metrics/qfft.json with accuracy / length / long-CoT rate on easy and hard questions, RAK and AES
for each, loadable HF models and saved responses; a malformed JSONL line fails before training."""
from __future__ import annotations

import json

import pytest

from flows.launch import run_method
from tasks import track
from tests.conftest import finished_flow_runs

MODELS = ("base", "sft", "qfft", "sft_noise_iv", "qfft_noise_iv")


def test_tiny_flow_writes_metrics_plots_models_and_mlflow_runs(project, prefect_server):
    run_method("qfft", "tiny")
    metrics = json.loads((project / "metrics" / "qfft.json").read_text())
    assert sorted(k for k, v in metrics.items() if isinstance(v, dict)) == sorted(MODELS)  # the report's rows
    questions = metrics["questions"]
    for name in MODELS:
        row = metrics[name]
        assert row["questions_easy"] + row["questions_hard"] == questions
        assert 0 <= row["all_accuracy"] <= 1 and 0 <= row["all_long_cot_rate"] <= 1 and row["all_mean_length"] >= 0
        assert -1 <= row["rak"] <= 1
        responses = (project / "models" / "qfft" / name / "responses.jsonl").read_text().splitlines()
        assert len(responses) == questions
        rows = [json.loads(line) for line in responses]
        assert row["all_accuracy"] == pytest.approx(sum(r["correct"] for r in rows) / questions)
    base = metrics["base"]
    # easy = the base answered correctly: its accuracy is 1 on easy, 0 on hard by definition
    assert base.get("easy_accuracy", 1.0) == 1.0 and base.get("hard_accuracy", 0.0) == 0.0
    assert metrics["qfft_minus_sft_rak"] == pytest.approx(metrics["qfft"]["rak"] - metrics["sft"]["rak"])

    parent, children = finished_flow_runs(project, "qfft")
    assert {r.data.tags["variant"] for r in children} == set(MODELS)
    assert all(r.info.status == "FINISHED" for r in children)
    assert all("rak" in r.data.metrics for r in children)  # the evaluation is on each model's run
    arts = {a.path.rsplit("/", 1)[-1] for a in track.client().list_artifacts(parent.info.run_id, "plots")}
    assert {"qfft_comparison.png", "qfft_comparison.csv"} <= arts

    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(project / "models" / "qfft" / "qfft" / "hf")
    assert model.config.model_type == "paperline_causal_lm"
    assert json.loads((project / "models" / "qfft" / "run.json").read_text())["complete"]


def test_a_malformed_finetune_jsonl_fails_before_training_naming_the_file_and_line(project):
    from flows.launch import resolve
    from paperline.methods.qfft.data import QFFTDataError
    from tasks.qfft import prepare_data

    good = project / "eval.jsonl"
    good.write_text(json.dumps({"question": "1+1", "solution": "2", "answer": "2"}) + "\n")
    bad = project / "limo.jsonl"
    bad.write_text(json.dumps({"question": "q", "solution": "s", "answer": "1"}) + "\n" + '{"question": "q"}\n')
    _, cfg = resolve("qfft", "tiny", [f"real_data.finetune_jsonl={bad}", f"real_data.eval_jsonl={good}",
                                      f"base_model_path={project / 'no-model'}"])
    with pytest.raises(QFFTDataError, match=r"limo.jsonl: line 2: missing field 'solution'"):
        prepare_data(cfg)
    assert not (project / "models" / "qfft" / "base").exists()


def test_an_unknown_parameter_is_named(project):
    from flows.launch import resolve
    from paperline.config import ParamsError

    with pytest.raises(ParamsError, match="finetune.stepz"):
        resolve("qfft", "tiny", ["finetune.stepz=3"])
