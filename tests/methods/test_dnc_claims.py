"""The claim metrics follow the rows they are computed from."""
from __future__ import annotations

from paperline.methods.dnc.summary import claims


def _row(f_dnc, f_cos, best, rank, frac):
    return {"dnc_objective": f_dnc, "cosine_objective": f_cos, "best_trained_objective": best,
            "numerical_rank_best": rank, "dnc_fraction": frac}


def test_claims_hold_when_rows_show_the_effect():
    summary = {"K10_L1": _row(0.19, 0.56, 0.19, 9, 1.0), "K10_L4": _row(0.085, 0.065, 0.058, 4, 0.25),
               "K4_L1": _row(0.064, 0.077, 0.064, 3, 1.0)}
    out = claims(summary)
    assert out["claim_L1_at_dnc"] and out["claim_deep_low_rank_beats_dnc"]
    assert out["dnc_persistence_where_beaten"] == out["dnc_persistence_where_beaten_K10"] == 0.25


def test_claims_fail_when_training_stays_at_dnc_or_misses_it():
    stuck = {"K10_L1": _row(0.19, 0.56, 0.19, 9, 1.0), "K10_L4": _row(0.085, 0.065, 0.085, 9, 1.0)}
    out = claims(stuck)
    assert out["claim_L1_at_dnc"] and not out["claim_deep_low_rank_beats_dnc"]
    assert out["dnc_persistence_where_beaten"] is None
    missed = {"K10_L1": _row(0.19, 0.56, 0.25, 9, 0.0)}
    assert not claims(missed)["claim_L1_at_dnc"]
