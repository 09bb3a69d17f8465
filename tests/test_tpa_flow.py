"""The TPA flow end to end at the tiny profile: the corpus is built, all six variants train with the
same budget (one MLflow child each, plus the decode timing), metrics/tpa.json holds the comparison
with Table 1's cache sizes, plots and a loadable HF model per variant are written."""
from __future__ import annotations

import json

import yaml

from flows.launch import run_method
from tasks import track
from tests.conftest import finished_flow_runs

VARIANTS = ["mha", "mqa", "gqa", "mla", "tpa", "tpa_kvonly"]


def test_tiny_flow_writes_metrics_plots_models_and_mlflow_runs(project, prefect_server):
    run_method("tpa", "tiny")
    metrics = json.loads((project / "metrics" / "tpa.json").read_text())
    tiny = yaml.safe_load((project / "params.yaml").read_text())["tpa"]["profiles"]["tiny"]
    rows = {k: v for k, v in metrics.items() if isinstance(v, dict)}
    assert sorted(rows) == sorted(VARIANTS)
    for name, row in rows.items():
        assert row["attention_params"] == row["attention_params_formula"], name
        assert row["kv_cache_elements_per_token_per_layer"] == row["kv_cache_formula"], name
        assert row["val_perplexity"] > 1 and row["tokens_seen"] == tiny["train"]["steps"] * 4 * 32
        for c in tiny["decode_contexts"]:
            assert row[f"decode_ms_per_token_ctx{c}"] > 0 and f"decode_time_vs_mha_ctx{c}" in row
    assert rows["mha"]["decode_time_vs_mha_ctx16"] == 1.0
    assert (rows["tpa"]["kv_cache_small"], rows["mha"]["kv_cache_small"], rows["tpa"]["kv_cache_medium"]) == (392, 1536, 444)
    assert metrics["cache_ratio_mha_over_tpa"] == (rows["mha"]["kv_cache_formula"] / rows["tpa"]["kv_cache_formula"])
    assert (project / "data" / "text" / "shakespeare" / "tokenizer.json").exists()  # built by the flow

    parent, children = finished_flow_runs(project, "tpa")
    c = track.client()
    assert parent.data.tags["data_version"].startswith("sha256:")
    assert sorted(r.data.tags["variant"] for r in children) == sorted(VARIANTS + ["decode_time"])
    assert all(r.info.status == "FINISHED" for r in children)
    tpa_child = next(r for r in children if r.data.tags["variant"] == "tpa")
    assert len(c.get_metric_history(tpa_child.info.run_id, "train_loss")) == 3
    assert len(c.get_metric_history(tpa_child.info.run_id, "val_loss")) == 2
    pngs = {a.path.rsplit("/", 1)[-1] for a in c.list_artifacts(parent.info.run_id, "plots")}
    assert {"val_loss.png", "kv_cache.png", "decode_time.png", "val_loss.csv"} <= pngs
    assert (project / "plots" / "tpa" / "decode_ms_per_token.csv").read_text().startswith("context,")

    from transformers import AutoModelForCausalLM

    hf = project / "models" / "tpa" / "tpa" / "hf"
    model = AutoModelForCausalLM.from_pretrained(hf)
    assert model.config.attention == "tpa" and (hf / "tokenizer.json").exists()
    assert json.loads((project / "models" / "tpa" / "run.json").read_text())["complete"]
