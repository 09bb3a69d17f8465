"""TPA's claims from hand-made per-seed rows: the val-loss comparisons, the untrained model, and
the cache identities against Table 1's formulas."""
from __future__ import annotations

import pytest

from paperline.methods.tpa.claims import SPECS, evaluate
from paperline.methods.tpa.summary import method_metrics

CACHE = {"mha": (256, 256), "mqa": (64, 64), "gqa": (128, 128), "mla": (80, 80), "tpa": (148, 148)}


def _per_seed(losses: dict[str, list[float]], initial: float = 6.2, cache=CACHE) -> dict:
    return {v: {s: {"val_loss": loss, "initial_val_loss": initial + s / 100,
                    "kv_cache_elements_per_token_per_layer": cache[v][0], "kv_cache_formula": cache[v][1]}
                for s, loss in enumerate(values)} for v, values in losses.items()}


def _by_name(per_seed):
    claims = {c.name: c for c in evaluate(per_seed)}
    assert set(claims) <= {s.name for s in SPECS}
    return claims


LOSSES = {"mha": [4.09, 4.12, 4.05], "mqa": [4.23, 4.26, 4.22], "gqa": [4.25, 4.20, 4.27],
          "mla": [3.60, 3.75, 3.66], "tpa": [3.63, 3.65, 3.61]}


def test_lower_loss_than_mha_is_shown_and_a_gap_below_the_seed_noise_is_not():
    claims = _by_name(_per_seed(LOSSES))
    below_mha = claims["tpa_below_mha_val_loss"]
    assert below_mha.verdict == "shown" and below_mha.seeds == 3 and below_mha.effect == pytest.approx(3.63 - 4.08667, abs=1e-5)
    assert claims["tpa_below_gqa_val_loss"].verdict == "shown"
    assert claims["tpa_below_mla_val_loss"].verdict == "inconclusive"  # −0.03, +0.10, −0.05
    trivial = claims["tpa_below_initial_val_loss"]
    assert trivial.trivial and trivial.verdict == "shown" and trivial.versus_mean == pytest.approx(6.21)


def test_a_worse_tpa_is_reversed_and_two_seeds_are_never_a_verdict():
    worse = {"mha": [3.5, 3.52, 3.51], "tpa": [3.9, 3.95, 3.93]}
    assert _by_name(_per_seed(worse))["tpa_below_mha_val_loss"].verdict == "reversed"
    two = {v: values[:2] for v, values in LOSSES.items()}
    assert _by_name(_per_seed(two))["tpa_below_mha_val_loss"].verdict == "inconclusive"


def test_cache_identities_hold_to_the_element_and_fail_on_one_off():
    claims = _by_name(_per_seed(LOSSES))
    assert claims["kv_cache_matches_table1"].verdict == "exact"
    ratio = claims["tpa_cache_ratio_vs_mha_matches_formula"]
    assert ratio.verdict == "exact" and ratio.effect == pytest.approx(256 / 148)
    off = dict(CACHE, tpa=(152, 148))  # a cache four elements larger than the formula
    claims = _by_name(_per_seed(LOSSES, cache=off))
    assert claims["kv_cache_matches_table1"].verdict == "not_exact" and claims["kv_cache_matches_table1"].effect == 4
    assert claims["tpa_cache_ratio_vs_mha_matches_formula"].verdict == "not_exact"


def test_rows_are_the_mean_over_seeds_and_carry_the_claims():
    results = [{"variant": v, "seed": s, "heads": 4, "val_loss": loss, "val_perplexity": 2.0, "initial_val_loss": 6.2,
                "kv_cache_elements_per_token_per_layer": CACHE[v][0], "kv_cache_formula": CACHE[v][1],
                "history": {}, "eval_history": {}}
               for v, values in LOSSES.items() for s, loss in enumerate(values)]
    metrics = method_metrics(results, {}, "tiny")
    assert metrics.rows["tpa"]["val_loss"] == pytest.approx(3.63) and metrics.rows["tpa"]["seeds"] == 3
    assert metrics.rows["mha"]["val_loss_std"] == pytest.approx(0.0351188, abs=1e-6)
    assert metrics.rows["mha"]["kv_cache_elements_per_token_per_layer"] == 256  # shared by the seeds: kept
    assert metrics.details["val_loss_by_seed"]["tpa"] == {"0": 3.63, "1": 3.65, "2": 3.61}
    assert {c.name for c in metrics.claims} == {s.name for s in SPECS}
    assert not any("claim" in k or "best" in k for k in metrics.headline)
