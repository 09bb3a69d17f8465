"""HRM-PET's claims on hand-made per-run figures: paired per seed (the mean over its sequences), shown when HRM-PET
is above its comparator on every run by more than the spread, reversed or inconclusive otherwise;
a claim whose variant did not run is left out; every name unique, one against the trivial baseline."""
from __future__ import annotations

import pytest

from paperline.methods.hrm_pet.claims import SPECS, evaluate

RUNS = [(s, seed) for s in ("mnist", "fashion") for seed in (0, 1, 2)]


def _runs(**offsets: float) -> dict:
    """variant -> run -> figures: every variant at 0.70 A_N and 0.72 matching, plus its offset and
    a small run-dependent wobble that the pairing cancels. The offset is 0.9x, 1x, 1.1x at seeds 0, 1, 2
    (mean 1x): a gap the same at every seed has no interval and stays inconclusive at 3 seeds."""
    base = {run: 0.001 * i for i, run in enumerate(RUNS)}
    out = {}
    scale = {run: 0.9 + 0.1 * run[1] for run in RUNS}
    for v in ("frozen_head", "hide_lora", "drm", "crm", "ctird", "hrm_pet"):
        off = offsets.get(v, 0.0)
        out[v] = {run: {"final_accuracy": 0.70 + off * scale[run] + w + (0.002 * (run[1] % 2) if v == "ctird" else 0.0),
                        "matching": 0.72 + off * scale[run] / 2 + w} for run, w in base.items()}
    return out


def test_specs_are_unique_and_one_is_trivial():
    names = [s.name for s in SPECS]
    assert len(names) == len(set(names))
    assert [s.versus for s in SPECS if s.trivial] == ["frozen_head"]


def test_shown_reversed_and_inconclusive_from_per_run_pairs():
    claims = {c.name: c for c in evaluate(_runs(hrm_pet=0.01, drm=-0.005, frozen_head=-0.2, ctird=-0.001))}
    assert claims["hrm_pet_above_frozen_head"].verdict == "shown" and claims["hrm_pet_above_frozen_head"].trivial
    assert claims["hrm_pet_above_hide_lora"].verdict == "shown" and claims["hrm_pet_above_hide_lora"].seeds == 3
    assert claims["hrm_pet_above_hide_lora"].effect == pytest.approx(0.01)
    assert claims["drm_above_hide_lora"].verdict == "reversed"
    assert claims["drm_raises_matching"].verdict == "reversed" and claims["drm_raises_matching"].effect == pytest.approx(-0.0025)
    assert claims["crm_above_hide_lora"].verdict == "inconclusive"  # identical on every run: no interval off zero
    # ctird: about −0.001 and +0.001 on alternate seeds: the interval holds zero
    assert claims["ctird_above_hide_lora"].verdict == "inconclusive" and claims["ctird_above_hide_lora"].low < 0


def test_the_sequences_of_a_seed_are_one_pair_not_several():
    """Six runs (two sequences × three seeds) are three pairs: HRM-PET above on both sequences of one
    seed only is one seed's worth of evidence."""
    runs = _runs()
    for sequence in ("mnist", "fashion"):
        runs["hrm_pet"][(sequence, 0)]["final_accuracy"] += 0.05
    claim = {c.name: c for c in evaluate(runs)}["hrm_pet_above_hide_lora"]
    assert claim.seeds == 3 and claim.effect == pytest.approx(0.05 / 3) and claim.verdict == "inconclusive"


def test_one_run_per_variant_is_never_a_verdict_and_absent_variants_are_skipped():
    runs = _runs(hrm_pet=0.05)
    one = {v: {RUNS[0]: by[RUNS[0]]} for v, by in runs.items() if v not in ("drm", "crm")}
    claims = {c.name: c for c in evaluate(one)}
    assert claims["hrm_pet_above_hide_lora"].verdict == "inconclusive" and claims["hrm_pet_above_hide_lora"].seeds == 1
    assert set(claims) == {"hrm_pet_above_frozen_head", "hrm_pet_above_hide_lora", "ctird_above_hide_lora"}
