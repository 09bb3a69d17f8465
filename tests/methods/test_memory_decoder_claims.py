"""Memory Decoder's claims and rows from hand-made per-seed sweeps: λ chosen on the dev half of the
seed-mean sweep, every seed scored at it, the base alone as the trivial baseline."""
from __future__ import annotations

import pytest

from paperline.methods.memory_decoder.claims import SPECS, evaluate
from paperline.methods.memory_decoder.config import MemoryDecoderConfig
from paperline.methods.memory_decoder.summary import method_metrics

LAMBDAS = [0.0, 0.5]


def _entry(domain: float, general: float, base=(80.0, 60.0)) -> dict:
    """{split: {λ: ppl}}: λ = 0 the base alone; at 0.5 the given domain (dev too) and general ppl."""
    return {"domain_dev": {0.0: base[0], 0.5: domain}, "domain": {0.0: base[0], 0.5: domain},
            "general": {0.0: base[1], 0.5: general}}


def _evaluation(memdec_domain: list[float], knn_domain: float = 2.1, memdec_general=80.0, knn_general=100.0) -> dict:
    results = {}
    for seed, domain in enumerate(memdec_domain):
        results[seed] = {}
        for size in ("small", "large"):
            results[seed] |= {f"{size}/base": {split: {0.0: s[0.0]} for split, s in _entry(0, 0).items()},
                              f"{size}/knn_lm": _entry(knn_domain, knn_general),
                              f"{size}/memdec": _entry(domain, memdec_general + seed)}
    timing = {size: {"base_ms_per_token": 0.01, "knn_lm_ms_per_token": 2.0, "memdec_ms_per_token": 0.03,
                     "knn_lm_vs_base": 200.0, "memdec_vs_base": 3.0, "knn_lm_over_memdec": 66.7}
              for size in ("small", "large")}
    return {"results": results, "timing": timing}


def _metrics(evaluation):
    cfg = MemoryDecoderConfig(lambdas=LAMBDAS)
    bases = {size: {"params": 1, "general_val_perplexity": 50.0} for size in ("small", "large")}
    memdecs = {seed: {"final_loss": 1.0} for seed in evaluation["results"]}
    return method_metrics(cfg, bases, {"entries": 10}, memdecs, evaluation, "tiny")


def test_memdec_beats_the_base_and_trails_knn_lm_on_the_domain():
    metrics = _metrics(_evaluation([2.3, 2.25, 2.28]))
    claims = {c.name: c for c in metrics.claims}
    assert set(claims) == {s.name for s in SPECS}
    trivial = claims["memdec_below_base_domain_ppl_small"]
    assert trivial.trivial and trivial.verdict == "shown" and trivial.versus_mean == 80.0 and trivial.seeds == 3
    assert claims["memdec_below_knn_lm_domain_ppl_large"].verdict == "reversed"  # 2.28 mean against 2.1
    assert claims["memdec_below_knn_lm_general_ppl_small"].verdict == "shown"  # 80–82 against 100
    row = metrics.rows["small/memdec"]
    assert row["lambda"] == 0.5 and row["domain_ppl"] == pytest.approx(2.2766667) and row["seeds"] == 3
    assert row["tuning"] == metrics.rows["small/knn_lm"]["tuning"] == "λ grid of 2, chosen on domain_dev"
    assert row["domain_ppl"] == metrics.details["ppl_by_lambda"]["small/memdec"]["domain"]["0.5"]
    assert metrics.rows["small/base"]["domain_ppl"] == 80.0 and metrics.rows["small/base"]["domain_ppl_std"] == 0.0
    assert metrics.details["domain_ppl_by_seed"]["small/memdec"] == {"0": 2.3, "1": 2.25, "2": 2.28}
    assert sorted(metrics.tables["memdec_training"]) == ["memdec/seed0", "memdec/seed1", "memdec/seed2"]


def test_a_gap_within_the_seed_spread_or_one_seed_is_inconclusive():
    claims = {c.name: c for c in _metrics(_evaluation([1.9, 2.4, 2.0])).claims}
    assert claims["memdec_below_knn_lm_domain_ppl_small"].verdict == "inconclusive"
    one = {c.name: c for c in _metrics(_evaluation([2.3])).claims}
    assert one["memdec_below_base_domain_ppl_small"].verdict == "inconclusive" and one["memdec_below_base_domain_ppl_small"].seeds == 1


def test_evaluate_reports_only_the_claims_whose_rows_it_has():
    per_seed = {"small/memdec": {0: {"domain_ppl": 2.0, "general_ppl": 70.0}},
                "small/base": {0: {"domain_ppl": 80.0, "general_ppl": 60.0}}}
    assert [c.name for c in evaluate(per_seed)] == ["memdec_below_base_domain_ppl_small"]
