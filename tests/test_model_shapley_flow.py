"""The Model Shapley flow's outputs in the tiny DAG (the record with its claims, a report row and an
MLflow child run per ranking and per step with a run per seed nested under it carrying the curves,
the ground truth's exact efficiency, plots, per-seed checkpoints), and a
corpus that is missing or does not fit refused before any work, naming the file."""
from __future__ import annotations

import json

import pytest
import yaml

from paperline.metrics import validate_metrics
from tasks import track
from tests.conftest import finished_flow_runs, report_rows

ESTIMATORS = ["magnitude", "grad_weight", "obd", "model_shapley", "model_shapley_signed", "paper_sign",
              "model_shapley_empirical", "random"]


def test_tiny_dag_outputs(dag):
    path = dag / "results" / "model_shapley.json"
    metrics = validate_metrics(json.loads(path.read_text()), str(path))
    tiny = yaml.safe_load((dag / "params" / "model_shapley.yaml").read_text())["model_shapley"]["profiles"]["tiny"]
    assert sorted(metrics.rows) == sorted(report_rows(dag, "model_shapley")) == sorted(ESTIMATORS)
    assert (metrics.profile, metrics.baseline, metrics.primary_metric, metrics.higher_is_better) == \
        ("tiny", "magnitude", "spearman_vs_shapley", True)
    for name, row in metrics.rows.items():
        assert -1 <= row["spearman_vs_shapley"] <= 1, name
        assert 0 <= row["prune_accuracy_auc"] <= 1 and 0 <= row["finetune_shift_accuracy"] <= 1, name
        assert row["lm_prune_loss_auc"] > 0 and row["lm_ppl_at_50pct"] > 1, name
    headline = metrics.headline
    ms = metrics.rows["model_shapley"]
    seeds = tiny["seeds"]
    assert headline["model_shapley_spearman"] == ms["spearman_vs_shapley"]
    best = max(("magnitude", "grad_weight", "obd", "random"), key=lambda v: (metrics.rows[v]["spearman_vs_shapley"], v))
    assert headline["model_shapley_margin_spearman_vs_shapley"] == pytest.approx(
        ms["spearman_vs_shapley"] - metrics.rows[best]["spearman_vs_shapley"])
    assert not any("claim" in k or isinstance(v, bool) for k, v in headline.items())
    from paperline.methods.model_shapley.claims import SPECS

    claims = {c.name: c for c in metrics.claims}
    assert set(claims) == {s.name for s in SPECS} and any(c.trivial for c in claims.values())
    assert all(c.seeds == len(seeds) for c in claims.values())
    assert claims["model_shapley_spearman_above_random"].method_mean == pytest.approx(ms["spearman_vs_shapley"])
    gt = metrics.details["ground_truth"]
    hidden = tiny["digits"]["hidden"]
    assert len(gt["phi"]) == hidden and gt["permutations"] == tiny["permutations"]
    assert gt["sum_phi"] == pytest.approx(gt["value_full_minus_empty"], abs=1e-9)  # efficient by construction
    assert headline["digits_estimator_over_train_step"] > 0 and headline["lm_estimator_over_train_step"] > 0
    assert len(metrics.details["finetune_units"]["obd"]) == 1  # ⌈10% of 8⌉
    assert set(metrics.details["lm_aggregates"]) == {"layer0_heads_phi", "layer0_mlp_phi"}

    parent, children = finished_flow_runs(dag, "model_shapley")
    c = track.client()
    assert parent.data.tags["data_version"].startswith("sha256:")
    assert sorted(r.data.tags["variant"] for r in children) == sorted(ESTIMATORS + ["digits_mlp", "causal_lm",
                                                                                 "ground_truth"])
    assert all(r.info.status == "FINISHED" for r in children)
    for child in children:
        variant = child.data.tags["variant"]
        nested = c.search_runs([parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{child.info.run_id}'")
        assert sorted(r.data.tags["variant"] for r in nested) == sorted(f"{variant}/seed{s}" for s in seeds)
        assert all(r.info.status == "FINISHED" for r in nested)
        if variant in metrics.rows:
            for key in ("spearman_vs_shapley", "prune_accuracy_auc", "lm_prune_loss_auc"):
                assert child.data.metrics[key] == metrics.rows[variant][key], (variant, key)
            for run in nested:  # each seed's curve and row on its own run
                curve = c.get_metric_history(run.info.run_id, "lm_prune_perplexity")
                assert [m.step for m in curve] == [round(100 * f) for f in tiny["prune_fractions"]]
                seed = run.data.tags["variant"].rsplit("seed", 1)[1]
                assert run.data.metrics["spearman_vs_shapley"] == pytest.approx(
                    metrics.details["seed_rows"][seed][variant]["spearman_vs_shapley"])
    arts = {a.path.rsplit("/", 1)[-1] for a in c.list_artifacts(parent.info.run_id, "plots")}
    assert {"pruning_digits.png", "pruning_lm.png", "phi_vs_ground_truth.png", "pruning_digits.csv"} <= arts
    assert (dag / "plots" / "model_shapley" / "pruning_lm.csv").read_text().startswith("fraction,magnitude,")
    for ckpt in ("digits_mlp", "causal_lm", "ground_truth"):
        assert all((dag / "models" / "model_shapley" / ckpt / f"seed{s}" / "checkpoint.pt").is_file() for s in seeds)
    assert json.loads((dag / "models" / "model_shapley" / "run.json").read_text())["complete"]


def test_a_corpus_that_is_missing_or_does_not_fit_is_refused(project):
    from flows.launch import resolve
    from paperline.data.text_corpus import CorpusError
    from tasks.model_shapley import data

    _, cfg = resolve("model_shapley", "tiny", ["lm.corpus_dir=nowhere"])
    with pytest.raises(CorpusError, match=r"nowhere/train.bin: missing"):
        data(cfg)
    corpus = project / "bad"
    corpus.mkdir()
    (corpus / "corpus.json").write_text(json.dumps({"vocab_size": 3}))
    (corpus / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": 0, "b": 1, "c": 2}}}))
    (corpus / "train.bin").write_bytes(b"\x01\x00\x07")  # an odd number of bytes: not uint16 tokens
    (corpus / "val.bin").write_bytes(b"\x01\x00" * 40)
    _, cfg = resolve("model_shapley", "tiny", ["lm.corpus_dir=bad"])
    with pytest.raises(CorpusError, match=r"bad/train.bin: 3 bytes is not a whole number of uint16 tokens"):
        data(cfg)
