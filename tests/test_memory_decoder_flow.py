"""The Memory Decoder flow end to end at the tiny profile: the corpora are built, both bases, the
datastore and the MemDec train (one MLflow child each, plus one per evaluated variant),
metrics/memory_decoder.json holds the λ sweeps for both bases with the same MemDec, the datastore
size and the inference times; plots and loadable HF models are written."""
from __future__ import annotations

import json

import yaml

from flows.launch import run_method
from tasks import track
from tests.conftest import finished_flow_runs


def test_tiny_flow_writes_metrics_plots_models_and_mlflow_runs(project, prefect_server):
    run_method("memory_decoder", "tiny")
    metrics = json.loads((project / "metrics" / "memory_decoder.json").read_text())
    tiny = yaml.safe_load((project / "params.yaml").read_text())["memory_decoder"]["profiles"]["tiny"]
    assert metrics["lambdas"] == tiny["lambdas"]
    for size in ("small", "large"):
        row = metrics[size]
        for split in ("domain", "general", "domain_facts", "domain_dev"):
            assert row[f"base_{split}_ppl"] > 1
            for variant in ("knn_lm", "memdec"):
                sweep = row[f"{variant}_{split}_ppl_by_lambda"]
                assert sweep["0.0"] == row[f"base_{split}_ppl"]  # λ = 0 is the base alone
                assert row[f"{variant}_{split}_ppl"] == sweep[str(row[f"{variant}_best_lambda"])]
        for variant in ("knn_lm", "memdec"):  # λ is chosen on the dev half, never on the reported one
            dev = row[f"{variant}_domain_dev_ppl_by_lambda"]
            assert str(row[f"{variant}_best_lambda"]) == min(dev, key=dev.get)
        assert row["knn_lm_ms_per_token"] > 0 and row["memdec_ms_per_token"] > 0
        assert row["knn_lm_over_memdec"] == row["knn_lm_ms_per_token"] / row["memdec_ms_per_token"]
    assert metrics["small"]["params"] < metrics["large"]["params"]
    domain_train = (project / "models" / "memory_decoder" / "domain" / "train.bin").stat().st_size // 2
    assert metrics["datastore_entries"] == domain_train - 1
    assert metrics["datastore_index_bytes"] >= metrics["datastore_keys_bytes"]  # exact index: the keys + header
    assert sorted(k for k, v in metrics.items() if isinstance(v, dict)) == ["large", "small"]  # the report's rows

    parent, children = finished_flow_runs(project, "memory_decoder")
    c = track.client()
    assert parent.data.tags["data_version"].startswith("sha256:")
    expected = {"base_small", "base_large", "knn_datastore", "memdec"} | {
        f"{s}+{v}" for s in ("small", "large") for v in ("base", "knn_lm", "memdec")}
    assert {r.data.tags["variant"] for r in children} == expected
    assert all(r.info.status == "FINISHED" for r in children)
    arts = {a.path.rsplit("/", 1)[-1] for a in c.list_artifacts(parent.info.run_id, "plots")}
    assert {"perplexity_vs_lambda.png", "perplexity_vs_lambda.csv"} <= arts
    assert (project / "plots" / "memory_decoder" / "perplexity_vs_lambda.csv").read_text().startswith("lambda,")

    from transformers import AutoModelForCausalLM

    hf = project / "models" / "memory_decoder" / "memdec" / "hf"
    model = AutoModelForCausalLM.from_pretrained(hf)
    assert model.config.hidden_size == tiny["memdec"]["hidden_size"] and (hf / "tokenizer.json").exists()
    assert json.loads((project / "models" / "memory_decoder" / "run.json").read_text())["complete"]


def test_a_corrupt_domain_text_fails_before_training_naming_the_file_and_line(project):
    import pytest

    from flows.launch import resolve
    from paperline.data.text_corpus import CorpusError
    from tasks.memory_decoder import prepare_data

    bad = project / "domain.txt"
    bad.write_bytes(b"the first line\nthe second \xff line\n")
    _, cfg = resolve("memory_decoder", "tiny", [f"domain.text={bad}"])
    with pytest.raises(CorpusError, match=r"domain.txt: line 2: not UTF-8"):
        prepare_data(cfg)
    assert not (project / "models" / "memory_decoder" / "base_small").exists()
