"""LoTA-QAF's claims from a run's rows: the lossless merge as an exact identity (tolerance 0), the
recoveries per (task, bit width) against the quantised model (trivial), merged LoRA and QA-LoRA."""
from __future__ import annotations

import pytest

from paperline.methods.lota_qaf.claims import SPECS, evaluate


def _rows(lota_ppl=28.4, identical=True, on_grid=True) -> dict:
    return {"lm_w2_quantized": {"perplexity": 28.5}, "lm_w2_lora": {"perplexity": 28.52},
            "lm_w2_qalora": {"perplexity": 28.2},
            "lm_w2_lota": {"perplexity": lota_ppl, "bit_identical": identical, "codes_on_grid": on_grid},
            "digits_w2_quantized": {"accuracy": 0.95}, "digits_w2_lota": {"accuracy": 0.96, "bit_identical": True,
                                                                          "codes_on_grid": True}}


def test_specs_are_unique_and_the_quantized_model_is_the_trivial_baseline():
    names = [s.name for s in SPECS]
    assert len(names) == len(set(names))
    assert all(s.versus.endswith("_quantized") for s in SPECS if s.trivial) and any(s.trivial for s in SPECS)


def test_the_merge_is_exact_only_when_every_lota_merge_is_bit_identical():
    claims = {c.name: c for c in evaluate(_rows())}
    assert claims["lota_merge_bit_identical"].verdict == "exact" and claims["lota_merge_bit_identical"].effect == 0
    assert claims["lota_codes_on_grid"].verdict == "exact"
    broken = {c.name: c for c in evaluate(_rows(identical=False, on_grid=False))}
    assert broken["lota_merge_bit_identical"].verdict == "not_exact" and broken["lota_merge_bit_identical"].effect == 1
    assert broken["lota_codes_on_grid"].verdict == "not_exact"


def test_recoveries_are_one_seed_and_only_for_the_variants_run():
    claims = {c.name: c for c in evaluate(_rows())}
    assert set(claims) == {"lota_merge_bit_identical", "lota_codes_on_grid", "lm_w2_lota_beats_quantized",
                           "lm_w2_lota_beats_lora", "lm_w2_lota_beats_qalora", "digits_w2_lota_beats_quantized"}
    trivial = claims["lm_w2_lota_beats_quantized"]
    assert trivial.trivial and trivial.direction == "lower" and trivial.effect == pytest.approx(-0.1)
    assert claims["digits_w2_lota_beats_quantized"].direction == "higher"
    assert all(c.seeds == 1 and c.verdict == "inconclusive" for c in claims.values() if c.kind == "paired")
