"""The Memory Decoder flow's outputs in the tiny DAG: both bases, the datastore and a MemDec per
seed trained (one MLflow child each, the seeds nested under the MemDec's), one row and one child
per (base size, variant) with the λ chosen on the dev half, the sweeps, the datastore size, the
inference times and the claims; plots and loadable HF models. A corrupt domain text is refused
before any training, naming the file and line."""
from __future__ import annotations

import json

import pytest
import yaml

from paperline.methods.memory_decoder.claims import SPECS
from paperline.metrics import validate_metrics
from tasks import track
from tests.conftest import finished_flow_runs, report_rows

METHOD = "memory_decoder"
ROWS = [f"{size}/{variant}" for size in ("small", "large") for variant in ("base", "knn_lm", "memdec")]


def test_tiny_dag_outputs(dag):
    path = dag / "results" / f"{METHOD}.json"
    metrics = validate_metrics(json.loads(path.read_text()), str(path))
    tiny = yaml.safe_load((dag / "params" / f"{METHOD}.yaml").read_text())[METHOD]["profiles"]["tiny"]
    assert sorted(metrics.rows) == sorted(report_rows(dag, METHOD)) == sorted(ROWS)
    assert (metrics.profile, metrics.baseline, metrics.primary_metric) == ("tiny", None, "domain_ppl")
    assert metrics.details["lambdas"] == tiny["lambdas"]
    sweeps = metrics.details["ppl_by_lambda"]
    for size in ("small", "large"):
        base = metrics.rows[f"{size}/base"]
        assert base["lambda"] == 0.0 and base["time_vs_base"] == 1.0
        for split in ("domain", "general", "domain_facts", "domain_dev"):
            assert base[f"{split}_ppl"] > 1
        for variant in ("knn_lm", "memdec"):
            row = metrics.rows[f"{size}/{variant}"]
            for split in ("domain", "general", "domain_facts", "domain_dev"):
                sweep = sweeps[f"{size}/{variant}"][split]
                assert sweep["0.0"] == base[f"{split}_ppl"]  # λ = 0 is the base alone
                assert row[f"{split}_ppl"] == sweep[str(row["lambda"])]
            dev = sweeps[f"{size}/{variant}"]["domain_dev"]  # λ is chosen on the dev half, never on the reported one
            assert str(row["lambda"]) == min(dev, key=dev.get)
            assert row["ms_per_token"] > 0
        knn, memdec = metrics.rows[f"{size}/knn_lm"], metrics.rows[f"{size}/memdec"]
        assert knn["tuning"] == memdec["tuning"] == f"λ grid of {len(tiny['lambdas'])}, chosen on domain_dev"
        assert metrics.headline[f"{size}_memdec_over_knn_lm_domain_ppl"] == memdec["domain_ppl"] / knn["domain_ppl"]
        assert metrics.headline[f"{size}_knn_lm_over_memdec_time"] == \
            pytest.approx(knn["ms_per_token"] / memdec["ms_per_token"])
    bases = metrics.tables["bases"]
    assert bases["small"]["params"] < bases["large"]["params"]
    store = metrics.tables["datastore"]["knn_datastore"]
    domain_train = (dag / "models" / METHOD / "domain" / "train.bin").stat().st_size // 2
    assert store["entries"] == domain_train - 1
    assert store["index_bytes"] >= store["keys_bytes"]  # exact index: the keys + header
    seeds = tiny["seeds"]  # a MemDec per seed; its row is the mean over them
    assert sorted(metrics.tables["memdec_training"]) == [f"memdec/seed{s}" for s in seeds]
    assert all(row["final_loss"] > 0 for row in metrics.tables["memdec_training"].values())
    for size in ("small", "large"):
        assert metrics.rows[f"{size}/memdec"]["seeds"] == len(seeds)
        assert sorted(metrics.details["domain_ppl_by_seed"][f"{size}/memdec"]) == [str(s) for s in seeds]
    claims = {c.name: c for c in metrics.claims}
    assert set(claims) <= {s.name for s in SPECS} and claims["memdec_below_base_domain_ppl_small"].trivial
    assert all(c.seeds == len(seeds) for c in claims.values())

    parent, children = finished_flow_runs(dag, METHOD)
    c = track.client()
    assert parent.data.tags["data_version"].startswith("sha256:")
    assert {r.data.tags["variant"] for r in children} == {"base_small", "base_large", "knn_datastore", "memdec", *ROWS}
    assert all(r.info.status == "FINISHED" for r in children)
    assert {k: v for k, v in parent.data.metrics.items() if not k.startswith("claim.")} == metrics.headline
    for child in children:  # each (size, variant) run carries its row, under the same names on every run
        name = child.data.tags["variant"]
        if name in metrics.rows:
            numbers = {k: v for k, v in metrics.rows[name].items() if not isinstance(v, str)}  # not `tuning`
            assert {k: child.data.metrics[k] for k in numbers} == numbers
            sweep = c.get_metric_history(child.info.run_id, "domain_perplexity_by_lambda_index")
            assert len(sweep) == (1 if name.endswith("/base") else len(tiny["lambdas"]))
    for name in ("memdec", "small/memdec"):  # each seed's run nested under the MemDec's
        run = next(r for r in children if r.data.tags["variant"] == name)
        nested = c.search_runs([parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{run.info.run_id}'")
        assert sorted(r.data.tags["variant"] for r in nested) == [f"{name}/seed{s}" for s in seeds]
    arts = {a.path.rsplit("/", 1)[-1] for a in c.list_artifacts(parent.info.run_id, "plots")}
    assert {"perplexity_vs_lambda.png", "perplexity_vs_lambda.csv"} <= arts
    assert (dag / "plots" / METHOD / "perplexity_vs_lambda.csv").read_text().startswith("lambda,")

    from transformers import AutoModelForCausalLM

    import paperline.nn.causal_lm  # noqa: F401  (registers the model type with the Auto classes)

    hf = dag / "models" / METHOD / "memdec" / f"seed{seeds[0]}" / "hf"
    model = AutoModelForCausalLM.from_pretrained(hf)
    assert model.config.hidden_size == tiny["memdec"]["hidden_size"] and (hf / "tokenizer.json").exists()
    assert json.loads((dag / "models" / METHOD / "run.json").read_text())["complete"]


@pytest.mark.dag_stage("memory_decoder")
def test_a_corrupt_domain_text_is_refused_naming_the_file_and_line(dag_stage, project):
    """The flow's data step, on the DAG's general corpus (nothing to build): it fails before anything
    is written for training."""
    from flows.launch import resolve
    from paperline.data.text_corpus import CorpusError
    from tasks.memory_decoder import data

    bad = project / "domain.txt"
    bad.write_bytes(b"the first line\nthe second \xff line\n")
    _, cfg = resolve(METHOD, "tiny", [f"domain.text={bad.name}",
                                      f"general_corpus_dir={dag_stage / 'data' / 'text' / 'shakespeare'}"])
    with pytest.raises(CorpusError, match=r"domain.txt: line 2: not UTF-8"):
        data(cfg)
    assert not (project / "models" / METHOD).exists()
