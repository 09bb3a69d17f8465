"""CodeMerge's claims on hand-made per-seed rows: paired by seed, shown / reversed / inconclusive
from the interval, the cost claim in its own direction (lower), fewer than three seeds never a
verdict, a claim whose baseline did not run left out."""
from __future__ import annotations

import pytest

from paperline.methods.codemerge.claims import SPECS, evaluate


def _rows(seed: int, **online: float) -> dict:
    base = {"source": 0.50, "tent": 0.52, "pl": 0.20, "ema": 0.50, "mos": 0.49, "codemerge": 0.51} | online
    # codemerge's gaps move by 0.001 a seed: a gap the same at every seed has no interval (sign test)
    jitter = {"codemerge": 0.001 * seed}
    return {v: {"online_accuracy": a + 0.02 * seed + jitter.get(v, 0.0), "tail_accuracy": a - 0.01 + jitter.get(v, 0.0),
                "merge_seconds": {"mos": 10.0 + seed, "codemerge": 1.0}.get(v, 0.0)} for v, a in base.items()}


def test_specs_are_unique_and_one_is_trivial():
    names = [s.name for s in SPECS]
    assert len(names) == len(set(names)) and [s.versus for s in SPECS if s.trivial] == ["source"]


def test_verdicts_from_three_seeds():
    seed_rows = {s: _rows(s) for s in range(3)}
    seed_rows[1]["ema"]["online_accuracy"] += 0.04  # +0.01, −0.03, +0.01 against ema: no verdict
    claims = {c.name: c for c in evaluate(seed_rows)}
    assert claims["codemerge_above_source"].verdict == "shown" and claims["codemerge_above_source"].effect == pytest.approx(0.011)
    assert claims["codemerge_above_tent"].verdict == "reversed"
    assert claims["codemerge_above_ema"].verdict == "inconclusive"
    assert claims["codemerge_tail_above_pl"].verdict == "shown"
    faster = claims["codemerge_merges_faster_than_mos"]
    assert faster.verdict == "shown" and faster.direction == "lower" and faster.effect == pytest.approx(-10.0)


def test_two_seeds_are_no_verdict_and_missing_baselines_are_skipped():
    seed_rows = {s: {v: r for v, r in _rows(s).items() if v not in ("mos", "ema")} for s in range(2)}
    claims = {c.name: c for c in evaluate(seed_rows)}
    assert set(claims) == {"codemerge_above_source", "codemerge_above_tent", "codemerge_above_pl",
                           "codemerge_tail_above_pl"}
    assert all(c.verdict == "inconclusive" and c.seeds == 2 for c in claims.values())
