"""LoTA-QAF's claims from a run's per-seed rows: the lossless merge as an exact identity (tolerance 0)
over every seed's merges, the recoveries per (task, bit width) paired by seed against the quantised
model (trivial, one figure at every seed), merged LoRA and QA-LoRA."""
from __future__ import annotations

import pytest

from paperline.methods.lota_qaf.claims import SPECS, evaluate
from paperline.methods.lota_qaf.pipeline import over_seeds


def _lota(metric, value, identical=True, on_grid=True) -> dict:
    return {metric: value, "bit_identical": identical, "codes_on_grid": on_grid, "max_output_diff": 0.0}


def _run(lota_ppl=(28.4, 28.38, 28.41), identical=True, on_grid=True) -> tuple[dict, dict]:
    """(rows, seed_rows) as `run_group` gives them: LoTA broken at its last seed when asked."""
    seed_rows = {"lm_w2_lora": [_lota("perplexity", p) for p in (28.52, 28.5, 28.55)],
                 "lm_w2_qalora": [_lota("perplexity", p) for p in (28.2, 28.25, 28.22)],
                 "lm_w2_lota": [_lota("perplexity", p, identical or s < 2, on_grid or s < 2)
                                for s, p in enumerate(lota_ppl)],
                 "digits_w2_lota": [_lota("accuracy", a) for a in (0.96, 0.961, 0.959)]}
    rows = {"lm_w2_quantized": {"perplexity": 28.5}, "digits_w2_quantized": {"accuracy": 0.95}}
    return rows | {v: over_seeds(per_seed, "perplexity") for v, per_seed in seed_rows.items()}, seed_rows


def test_specs_are_unique_and_the_quantized_model_is_the_trivial_baseline():
    names = [s.name for s in SPECS]
    assert len(names) == len(set(names))
    assert all(s.versus.endswith("_quantized") for s in SPECS if s.trivial) and any(s.trivial for s in SPECS)


def test_the_merge_is_exact_only_when_every_seeds_lota_merge_is_bit_identical():
    claims = {c.name: c for c in evaluate(*_run())}
    assert claims["lota_merge_bit_identical"].verdict == "exact" and claims["lota_merge_bit_identical"].effect == 0
    assert claims["lota_codes_on_grid"].verdict == "exact"
    rows, seed_rows = _run(identical=False, on_grid=False)
    broken = {c.name: c for c in evaluate(rows, seed_rows)}
    assert broken["lota_merge_bit_identical"].verdict == "not_exact" and broken["lota_merge_bit_identical"].effect == 1
    assert broken["lota_codes_on_grid"].verdict == "not_exact"
    assert rows["lm_w2_lota"]["bit_identical"] is False and rows["digits_w2_lota"]["bit_identical"] is True


def test_recoveries_pair_by_seed_and_only_for_the_variants_run():
    claims = {c.name: c for c in evaluate(*_run())}
    assert set(claims) == {"lota_merge_bit_identical", "lota_codes_on_grid", "lm_w2_lota_beats_quantized",
                           "lm_w2_lota_beats_lora", "lm_w2_lota_beats_qalora", "digits_w2_lota_beats_quantized"}
    trivial = claims["lm_w2_lota_beats_quantized"]
    assert trivial.trivial and trivial.direction == "lower" and trivial.seeds == 3
    assert trivial.effect == pytest.approx(-0.103333, abs=1e-5) and trivial.verdict == "shown"
    assert claims["lm_w2_lota_beats_lora"].verdict == "shown"  # below LoRA's at every seed
    assert claims["lm_w2_lota_beats_qalora"].verdict == "reversed"  # above QA-LoRA's at every seed
    assert claims["digits_w2_lota_beats_quantized"].direction == "higher"
    one = {c.name: c for c in evaluate(*_run(lota_ppl=(28.4,)))}  # LoTA at one seed: too few to pair
    assert one["lm_w2_lota_beats_lora"].seeds == 1 and one["lm_w2_lota_beats_lora"].verdict == "inconclusive"


def test_a_methods_row_is_the_mean_over_seeds_and_its_checks_hold_at_every_seed():
    per_seed = [{"accuracy": 0.9, "bits": 2, "model_bytes": 100, "bit_identical": True, "max_output_diff": 0.0,
                 "changed_share": 0.1},
                {"accuracy": 0.94, "bits": 2, "model_bytes": 100, "bit_identical": False, "max_output_diff": 0.5,
                 "changed_share": 0.3}]
    row = over_seeds(per_seed, "accuracy")
    assert row["accuracy"] == pytest.approx(0.92) and row["accuracy_std"] == pytest.approx(0.02 * 2 ** 0.5)
    assert row["bits"] == 2 and isinstance(row["bits"], int) and row["model_bytes"] == 100
    assert row["bit_identical"] is False and row["max_output_diff"] == 0.5 and row["seeds"] == 2
    assert row["changed_share"] == pytest.approx(0.2)
    assert over_seeds(per_seed[:1], "accuracy") == per_seed[0] | {"accuracy_std": 0.0, "seeds": 1}
