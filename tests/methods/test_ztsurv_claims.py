"""ZTSurv's claims on hand-made per-seed rows, the random-risk baseline, and the rows over seeds."""
from __future__ import annotations

import numpy as np
import pytest

from paperline.methods.ztsurv.claims import RANDOM, SPECS, evaluate
from paperline.methods.ztsurv.summary import mean_rows, seed_rows
from paperline.methods.ztsurv.train import FoldResult, random_risk_fold


def rows(values: dict[str, list[float]]) -> dict:
    return {s: {m: {"c_index_mean": v[s]} for m, v in values.items()} for s in range(len(next(iter(values.values()))))}


def test_specs_are_unique_and_one_is_against_a_random_risk():
    names = [s.name for s in SPECS]
    assert len(names) == len(set(names))
    assert [s.versus for s in SPECS if s.trivial] == [RANDOM]


def test_shown_reversed_and_inconclusive():
    claims = {c.name: c for c in evaluate(rows({
        "random_risk": [0.49, 0.52, 0.50], "composition_cox": [0.47, 0.45, 0.46], "mean_pool": [0.56, 0.60, 0.52],
        "abmil": [0.58, 0.585, 0.575], "gcn": [0.66, 0.675, 0.65], "ztsurv": [0.62, 0.63, 0.61]}))}
    assert set(claims) == {s.name for s in SPECS}
    assert claims["ztsurv_above_random_risk"].verdict == "shown" and claims["ztsurv_above_random_risk"].trivial
    assert claims["ztsurv_above_composition_cox"].effect == pytest.approx(0.16)
    assert claims["ztsurv_above_abmil"].verdict == "shown"
    assert claims["ztsurv_above_mean_pool"].verdict == "inconclusive"  # +0.06, +0.03, +0.09: [-0.015, +0.135]
    # -0.04, -0.045, -0.04: a gap the same at every seed would have no interval (sign test, p = 0.25)
    assert claims["ztsurv_above_gcn"].verdict == "reversed"


def test_two_seeds_and_missing_methods():
    claims = evaluate(rows({"random_risk": [0.5, 0.5], "ztsurv": [0.9, 0.91]}))
    assert [c.name for c in claims] == ["ztsurv_above_random_risk"]
    assert claims[0].verdict == "inconclusive" and claims[0].seeds == 2 and claims[0].low > 0  # 2 < 3 seeds


def test_random_risk_is_seeded_and_near_chance():
    rng = np.random.default_rng(0)
    time, event = rng.exponential(size=400), rng.random(400) < 0.5
    test = np.arange(400)
    a, b = random_risk_fold(time, event, test, 0, 0), random_risk_fold(time, event, test, 0, 0)
    assert np.array_equal(a.test_risk, b.test_risk) and abs(a.c_index - 0.5) < 0.06
    assert not np.array_equal(a.test_risk, random_risk_fold(time, event, test, 0, 1).test_risk)
    assert not np.array_equal(a.test_risk, random_risk_fold(time, event, test, 1, 0).test_risk)


def test_rows_are_means_over_seeds_of_the_fold_means():
    time, event = np.arange(1.0, 9.0), np.array([1, 0, 1, 1, 0, 1, 0, 1])

    results = {}
    for seed, cs in ((0, (0.6, 0.8)), (1, (0.5, 0.7))):
        folds = []
        for k, (idx, c) in enumerate(zip(([0, 1, 2, 3], [4, 5, 6, 7]), cs)):
            folds.append(FoldResult(k, np.asarray(idx), -time[idx] + seed, c))
        results.setdefault("ztsurv", {})[seed] = folds
    per_seed = seed_rows(results, time, event)
    assert per_seed[0]["ztsurv"]["c_index_mean"] == pytest.approx(0.7) and per_seed[1]["ztsurv"]["c_index_mean"] == pytest.approx(0.6)
    row = mean_rows(per_seed)["ztsurv"]
    assert row["c_index_mean"] == pytest.approx(0.65) and row["seeds"] == 2
    assert row["c_index_mean_std"] == pytest.approx(np.std([0.7, 0.6], ddof=1))  # the spread over seeds
    assert row["c_index_std"] == pytest.approx(np.std([0.6, 0.8], ddof=1))  # over folds, mean over seeds
    assert row["c_index_oof"] == 1.0  # -time ranks every pair right
    assert (row["c_index_min"], row["c_index_max"]) == (0.5, 0.8)  # over every seed's folds
