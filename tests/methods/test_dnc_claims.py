"""The deep-NC claims follow the per-seed runs they are computed from."""
from __future__ import annotations

from paperline.methods.dnc.claims import SPECS, evaluate
from paperline.methods.dnc.summary import persistence
from paperline.methods.dnc.ufm import UFMGroupResult


def _group(K, L, m, f_dnc, objectives, ranks, at_dnc, initial=1.0):
    seeds = [{"seed_index": i, "objective": o, "rank_1e-3": r, "is_dnc": d}
             for i, (o, r, d) in enumerate(zip(objectives, ranks, at_dnc))]
    return UFMGroupResult(K=K, L=L, width=m * K, activation="linear", f_dnc_star=f_dnc, seeds=seeds,
                          history={"step": [0, 10], "objective": [[initial, o or initial] for o in objectives]})


def _by_name(results):
    claims = evaluate(results)
    assert {c.name for c in claims} <= {s.name for s in SPECS}
    return {c.name: c for c in claims}


def test_l1_at_dnc_and_deep_low_rank_hold_when_the_seeds_show_them():
    results = [_group(10, 1, 1, 0.19, [0.19, 0.1901, 0.2], [9, 9, 8], [True, True, False]),
               _group(4, 1, 1, 0.064, [0.064, 0.064, 0.064], [3, 3, 3], [True] * 3),
               _group(10, 4, 1, 0.085, [0.058, 0.060, 0.059], [4, 4, 5], [False] * 3),
               _group(10, 4, 4, 0.085, [0.058, 0.085, 0.061], [4, 9, 4], [False, True, False])]
    claims = _by_name(results)
    assert claims["dnc_l1_objective_at_f_dnc"].verdict == "exact"  # the best seed of each K, to 1e-3
    assert claims["dnc_l1_rank_k_minus_1"].verdict == "exact"
    below = claims["dnc_deep_below_f_dnc_k10_l4"]
    assert below.seeds == 3 and below.verdict == "shown"  # one value per seed index: the mean over widths and abs(below.versus_mean - 0.085) < 1e-12
    assert claims["dnc_deep_rank_below_k_minus_1_k10_l4"].verdict == "shown"
    assert "dnc_deep_below_f_dnc_k10_l6" not in claims  # no L = 6 in this run
    # wider: seed 1 at DNC at 4K, no seed at 1K: one seed of three is not a verdict
    wider = claims["dnc_share_rises_with_width"]
    assert wider.seeds == 3 and wider.effect == 1 / 3 and wider.verdict == "inconclusive"
    trivial = claims["dnc_trained_below_initial"]
    assert trivial.trivial and trivial.seeds == 3 and trivial.verdict == "shown"  # 12 runs, 3 seed indices


def test_claims_fail_when_training_misses_dnc_at_l1_or_stays_at_dnc_at_depth():
    results = [_group(10, 1, 1, 0.19, [0.25, 0.26, 0.25], [9, 9, 9], [False] * 3),  # 30% above f_DNC*
               _group(10, 4, 1, 0.085, [0.085, 0.085, 0.0851], [9, 9, 9], [True] * 3),
               _group(10, 6, 1, 0.082, [0.090, 0.091, 0.092], [9, 9, 9], [False] * 3)]
    claims = _by_name(results)
    assert claims["dnc_l1_objective_at_f_dnc"].verdict == "not_exact"
    assert claims["dnc_l1_rank_k_minus_1"].verdict == "exact"
    assert claims["dnc_deep_below_f_dnc_k10_l4"].verdict == "inconclusive"
    assert claims["dnc_deep_below_f_dnc_k10_l6"].verdict == "reversed"  # every seed above f_DNC*
    assert claims["dnc_deep_rank_below_k_minus_1_k10_l6"].verdict == "inconclusive"  # rank K−1 every seed
    assert "dnc_share_rises_with_width" not in claims  # one width only


def test_a_diverged_seed_drops_out_and_training_that_raises_the_objective_is_reversed():
    results = [_group(4, 1, 1, 0.064, [None, 1.5, 1.6, 1.7], [None, 3, 3, 3], [False] * 4, initial=1.0)]
    trivial = _by_name(results)["dnc_trained_below_initial"]
    assert trivial.seeds == 3 and trivial.verdict == "reversed"


def test_persistence_counts_only_groups_where_a_low_rank_solution_won():
    row = lambda f_dnc, best, rank, frac: {"dnc_objective": f_dnc, "best_trained_objective": best,
                                          "numerical_rank_best": rank, "dnc_fraction": frac}
    summary = {"K10_L1": row(0.19, 0.19, 9, 1.0), "K10_L4": row(0.085, 0.058, 4, 0.25),
               "K4_L4": row(0.028, 0.028, 3, 1.0)}
    assert persistence(summary) == {"dnc_persistence_where_beaten": 0.25, "dnc_persistence_where_beaten_K10": 0.25}
    assert persistence({"K4_L4": row(0.028, 0.028, 3, 1.0)})["dnc_persistence_where_beaten"] is None
