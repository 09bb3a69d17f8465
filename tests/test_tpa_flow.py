"""The TPA flow's outputs in the tiny DAG: all six variants trained with the same budget at each
seed (one MLflow child each with a nested run per seed, plus the decode timing), results/tpa.json
holds the comparison against MHA (the mean over seeds) with Table 1's cache sizes and the claims,
plots and a loadable HF model per variant; real token files are versioned by their contents."""
from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from paperline.methods.tpa.claims import SPECS
from paperline.metrics import validate_metrics
from tasks import track
from tests.conftest import finished_flow_runs, report_rows


def test_tiny_dag_outputs(dag):
    path = dag / "results" / "tpa.json"
    metrics = validate_metrics(json.loads(path.read_text()), str(path))
    tiny = yaml.safe_load((dag / "params" / "tpa.yaml").read_text())["tpa"]["profiles"]["tiny"]
    variants, seeds = tiny["variants"], tiny["seeds"]
    assert sorted(metrics.rows) == sorted(report_rows(dag, "tpa")) == sorted(variants)
    assert (metrics.profile, metrics.baseline, metrics.primary_metric, metrics.higher_is_better) == \
        ("tiny", "mha", "val_loss", False)
    rows = metrics.rows
    train = tiny["train"]
    for name, row in rows.items():
        assert row["attention_params"] == row["attention_params_formula"], name
        assert row["kv_cache_elements_per_token_per_layer"] == row["kv_cache_formula"], name
        assert row["val_perplexity"] > 1 and row["tokens_seen"] == train["steps"] * train["batch_size"] * train["block_size"]
        assert row["val_loss_vs_baseline"] == row["val_loss"] / rows["mha"]["val_loss"]
        by_seed = metrics.details["val_loss_by_seed"][name]  # the row is the mean over its seeds
        assert row["seeds"] == len(by_seed) == len(seeds) and row["val_loss"] == pytest.approx(np.mean(list(by_seed.values())))
        assert row["initial_val_loss"] > row["val_loss"] and "val_loss_std" in row
        for c in tiny["decode_contexts"]:
            assert row[f"decode_ms_per_token_ctx{c}"] > 0 and f"decode_time_vs_mha_ctx{c}" in row
    assert rows["mha"]["decode_time_vs_mha_ctx16"] == 1.0 and rows["mha"]["kv_cache_vs_mha"] == 1.0
    shapes = metrics.tables["paper_shapes"]
    assert (shapes["tpa"]["kv_cache_small"], shapes["mha"]["kv_cache_small"], shapes["tpa"]["kv_cache_medium"]) == \
        (392, 1536, 444)
    headline = metrics.headline
    assert headline["cache_ratio_mha_over_tpa"] == rows["mha"]["kv_cache_formula"] / rows["tpa"]["kv_cache_formula"]
    assert headline["cache_ratio_mha_over_tpa_paper_small"] == 1536 / 392
    assert headline["tpa_val_loss_vs_mha"] == rows["tpa"]["val_loss_vs_baseline"]
    claims = {c.name: c for c in metrics.claims}
    assert set(claims) <= {s.name for s in SPECS} and any(c.trivial for c in claims.values())
    assert claims["kv_cache_matches_table1"].verdict == "exact"
    assert claims["tpa_cache_ratio_vs_mha_matches_formula"].verdict == "exact"
    assert claims["tpa_below_mha_val_loss"].seeds == len(seeds) and claims["tpa_below_initial_val_loss"].trivial

    parent, children = finished_flow_runs(dag, "tpa")
    c = track.client()
    assert parent.data.tags["data_version"].startswith("sha256:")
    assert sorted(r.data.tags["variant"] for r in children) == sorted(variants + ["decode_time"])
    assert all(r.info.status == "FINISHED" for r in children)
    assert {k: v for k, v in parent.data.metrics.items() if not k.startswith("claim.")} == \
        {k: v for k, v in headline.items() if isinstance(v, float)}
    for child in children:  # each variant's run carries its row, under the same names on every run
        if child.data.tags["variant"] in rows:
            row = rows[child.data.tags["variant"]]
            for key in ("val_loss", "val_loss_vs_baseline", "kv_cache_elements_per_token_per_layer",
                        "decode_ms_per_token_ctx48"):
                assert child.data.metrics[key] == row[key], key
    tpa_child = next(r for r in children if r.data.tags["variant"] == "tpa")
    nested = c.search_runs([parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{tpa_child.info.run_id}'")
    assert sorted(r.data.tags["variant"] for r in nested) == [f"tpa/seed{s}" for s in seeds]  # a run per seed
    seed_run = next(r for r in nested if r.data.tags["variant"] == f"tpa/seed{seeds[0]}")
    assert len(c.get_metric_history(seed_run.info.run_id, "train_loss")) == 3
    assert len(c.get_metric_history(seed_run.info.run_id, "val_loss_by_step")) == 2
    assert seed_run.data.metrics["val_loss"] == metrics.details["val_loss_by_seed"]["tpa"][str(seeds[0])]
    arts = {a.path.rsplit("/", 1)[-1] for a in c.list_artifacts(parent.info.run_id, "plots")}
    assert {"val_loss.png", "kv_cache.png", "decode_time.png", "val_loss.csv"} <= arts
    assert (dag / "plots" / "tpa" / "decode_ms_per_token.csv").read_text().startswith("context,")

    from transformers import AutoModelForCausalLM

    import paperline.nn.causal_lm  # noqa: F401  (registers the model type with the Auto classes)

    hf = dag / "models" / "tpa" / "tpa" / f"seed{seeds[0]}" / "hf"
    model = AutoModelForCausalLM.from_pretrained(hf)
    assert model.config.attention == "tpa" and (hf / "tokenizer.json").exists()
    assert json.loads((dag / "models" / "tpa" / "run.json").read_text())["complete"]


def test_real_token_files_are_versioned_by_content(project):
    """Issue 19 §3: a token file rewritten with the same size gets another data version."""
    from flows.launch import resolve
    from tasks.tpa import data

    (project / "fw").mkdir()
    tokens = (np.arange(5000) % 300).astype(np.uint16)
    tokens.tofile(project / "fw" / "train.bin")
    tokens[:1000].tofile(project / "fw" / "val.bin")
    _, cfg = resolve("tpa", "tiny", ["data.train_bin=fw/train.bin", "data.val_bin=fw/val.bin", "data.vocab_size=300"])
    first = data(cfg)
    assert first.version.startswith("sha256:") and first.corpus_dir is None
    tokens[7] = 0  # same size, other contents
    tokens.tofile(project / "fw" / "train.bin")
    assert data(cfg).version != first.version
