"""SplashNet's claims from per-seed rows: each variant against the baseline of the same seed and
against the blank decoder (types nothing), shown / reversed / inconclusive as the seeds say."""
from __future__ import annotations

import pytest

from paperline.methods.splashnet.claims import BLANK, SPECS, blank_rows, evaluate


def _per_seed(cers: dict[str, tuple[float, ...]]) -> dict[str, dict[str, dict]]:
    return {v: {str(s): {"zero_shot_cer": c, "finetuned_cer": c / 4} for s, c in enumerate(cs)}
            for v, cs in cers.items()}


BLANK_ROWS = blank_rows([{"seed": s, "blank_cer": 100.0} for s in range(3)])


def test_specs_are_unique_and_the_paper_models_face_the_blank_decoder():
    names = [s.name for s in SPECS]
    assert len(names) == len(set(names))
    assert sorted(s.method for s in SPECS if s.trivial) == ["splashnet", "splashnet_mini"]
    assert {s.versus for s in SPECS if s.trivial} == {BLANK}
    assert BLANK_ROWS == {str(s): {"zero_shot_cer": 100.0, "finetuned_cer": 100.0} for s in range(3)}


def test_below_the_baseline_at_every_seed_is_shown_above_is_reversed():
    per_seed = _per_seed({"baseline": (50.0, 40.0, 60.0), "splashnet_mini": (30.0, 22.0, 41.0),
                          "splashnet": (55.0, 46.0, 64.0), "rtn": (20.0, 70.0, 35.0)})
    claims = {c.name: c for c in evaluate(per_seed, BLANK_ROWS)}
    assert set(claims) == {s.name for s in SPECS}
    mini = claims["splashnet_mini_below_baseline_zero_shot_cer"]
    assert mini.verdict == "shown" and mini.effect == pytest.approx(-19.0) and mini.seeds == 3
    assert claims["splashnet_mini_below_baseline_finetuned_cer"].verdict == "shown"
    assert claims["splashnet_below_baseline_zero_shot_cer"].verdict == "reversed"
    assert claims["rtn_below_baseline_zero_shot_cer"].verdict == "inconclusive"  # -30, +30, -25: seed noise
    blank = claims["splashnet_mini_below_blank_zero_shot_cer"]
    assert blank.trivial and blank.verdict == "shown" and blank.versus_mean == 100.0


def test_a_model_that_types_nothing_does_not_beat_the_blank_decoder():
    per_seed = _per_seed({"baseline": (100.0, 100.0, 100.0), "splashnet_mini": (100.0, 100.0, 100.0)})
    claims = {c.name: c for c in evaluate(per_seed, BLANK_ROWS)}
    assert claims["splashnet_mini_below_blank_zero_shot_cer"].verdict == "inconclusive"
    assert claims["splashnet_mini_below_blank_zero_shot_cer"].effect == 0.0
    assert "splashnet_below_blank_zero_shot_cer" not in claims  # SplashNet did not run


def test_two_seeds_decide_nothing():
    per_seed = _per_seed({"baseline": (90.0, 95.0), "splashnet_mini": (10.0, 12.0)})
    assert all(c.verdict == "inconclusive" and c.seeds == 2 for c in evaluate(per_seed, BLANK_ROWS))
