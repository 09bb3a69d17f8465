"""The LoTA-QAF flow's outputs in the tiny DAG (the record with its claims, headline and tables, a report row
and an MLflow child run per variant with a run per recovery seed nested under it, plots, the digits
MLP), and a bad bit width or model folder refused before any work."""
from __future__ import annotations

import json

import pytest
import yaml

from paperline.methods.lota_qaf.claims import SPECS
from paperline.metrics import validate_metrics
from tasks import track
from tests.conftest import finished_flow_runs, report_rows


def _tiny(project) -> dict:
    return yaml.safe_load((project / "params" / "lota_qaf.yaml").read_text())["lota_qaf"]["profiles"]["tiny"]


def _variants(project) -> list[str]:
    tiny = _tiny(project)
    names = [f"{t}_float" for t in tiny["tasks"]]
    return sorted(names + [f"{t}_w{b}_{m}" for t in tiny["tasks"] for b in tiny["bits"]
                           for m in ("quantized", "lota", "lora", "qalora")])


def test_tiny_dag_outputs(dag):
    path = dag / "results" / "lota_qaf.json"
    metrics = validate_metrics(json.loads(path.read_text()), str(path))
    variants = _variants(dag)
    assert sorted(metrics.rows) == sorted(report_rows(dag, "lota_qaf")) == variants
    headline, claims = metrics.headline, {c.name: c for c in metrics.claims}
    # the exact properties hold at any scale: LoTA's merge is lossless and stays on the grid
    assert claims["lota_merge_bit_identical"].verdict == claims["lota_codes_on_grid"].verdict == "exact"
    assert headline["lota_max_merge_loss"] == 0
    assert set(claims) <= {s.name for s in SPECS} and any(c.trivial for c in claims.values())
    assert {f"{t}_w{b}_lota_beats_{v}" for t in ("digits", "lm") for b in _tiny(dag)["bits"]
            for v in ("quantized", "lora", "qalora")} <= set(claims)
    seeds = len(_tiny(dag)["seeds"])
    paired = [c for c in claims.values() if c.kind == "paired"]
    assert all(c.seeds == seeds < 3 and c.verdict == "inconclusive" for c in paired)  # fewer than 3 at tiny
    for name, row in metrics.rows.items():
        if name.endswith("_lota"):
            assert row["merge_gap"] == 0 and row["max_output_diff"] == 0
            assert row["model_bytes"] < row["lora16_bytes"]
        if name.endswith("_qalora"):
            assert row["changed_share"] == 0
    for variant, per_seed in metrics.details["seed_rows"].items():  # a method's row: the mean over seeds
        assert len(per_seed) == metrics.rows[variant]["seeds"] == seeds
        key = "accuracy" if variant.startswith("digits") else "perplexity"
        assert metrics.rows[variant][key] == pytest.approx(sum(r[key] for r in per_seed) / seeds)
    assert set(metrics.tables) == {"digits_accuracy", "lm_perplexity"}

    parent, children = finished_flow_runs(dag, "lota_qaf")
    assert sorted(r.data.tags["variant"] for r in children) == variants
    for child in children:
        row = metrics.rows[child.data.tags["variant"]]
        key = "accuracy" if child.data.tags["variant"].startswith("digits") else "perplexity"
        assert child.data.metrics[key] == pytest.approx(row[key])
    lota = next(child for child in children if child.data.tags["variant"] == "lm_w2_lota")
    nested = track.client().search_runs([parent.info.experiment_id],
                                        filter_string=f"tags.mlflow.parentRunId = '{lota.info.run_id}'")
    assert sorted(r.data.tags["variant"] for r in nested) == [f"lm_w2_lota/seed{s}" for s in range(seeds)]
    names = sorted(p.name for p in (dag / "plots" / "lota_qaf").glob("*.png"))
    assert names == ["digits_accuracy_by_bits.png", "digits_losses.png", "lm_losses.png", "lm_perplexity_by_bits.png"]
    assert (dag / "models" / "lota_qaf" / "digits_mlp.pt").is_file()
    assert json.loads((dag / "models" / "lota_qaf" / "run.json").read_text())["complete"]


def test_bad_bit_width_and_model_folder_are_refused_before_any_work(project, tmp_path):
    """The flow's two gates: the parameters (before Prefect starts) and its data step (before the
    run directory or an MLflow run exists)."""
    from flows.launch import resolve
    from paperline.config import ParamsError
    from paperline.train.lm_base import ModelDirError
    from tasks.lota_qaf import data

    with pytest.raises(ParamsError, match="lota_qaf.*bits.*bit width 5"):
        resolve("lota_qaf", "tiny", ["bits=[4,5]"])
    _, cfg = resolve("lota_qaf", "tiny", [f"lm.model_dir={tmp_path / 'not_a_model'}"])
    with pytest.raises(ModelDirError, match="not_a_model"):
        data(cfg)
    assert not (project / "models" / "lota_qaf").exists()
