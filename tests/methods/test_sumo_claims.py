"""SUMO's claims from per-seed values: shown, reversed and inconclusive on hand-made numbers, the
claims of untrained optimizers left out, and the summary's seed pairing at each best lr (picked on
seed 0 for the causal LM)."""
from __future__ import annotations

import pytest

from paperline.methods.sumo.claims import INITIAL, SPECS, evaluate
from paperline.methods.sumo.summary import seed_rows, summarize, text_lm_summary

DIGITS = ["adamw", "galore_adamw", "muon", "sumo", "sumo_ns"]


def _digits(sumo, galore, ns, initial) -> dict:
    return {s: {"sumo": {"mean_train_loss": sumo[s], "test_loss": sumo[s] / 2},
                "galore_adamw": {"mean_train_loss": galore[s], "test_loss": galore[s] / 2},
                "sumo_ns": {"mean_train_loss": ns[s], "test_loss": ns[s] / 2},
                INITIAL: {"test_loss": initial[s]}} for s in range(len(sumo))}


def test_specs_are_unique_and_one_faces_the_initial_model():
    names = [s.name for s in SPECS]
    assert len(names) == len(set(names))
    assert [s.name for s in SPECS if s.trivial] == ["sumo_below_initial_test_loss", "lm_sumo_below_initial_val_loss"]
    assert all(s.versus == INITIAL for s in SPECS if s.trivial)


def test_digits_claims_shown_reversed_and_trivial():
    # gaps that differ a little by seed: the same gap at every seed has no interval, and 3 seeds are
    # too few for the sign test that judges it
    rows = _digits(sumo=[0.20, 0.21, 0.19], galore=[0.25, 0.27, 0.24], ns=[0.15, 0.16, 0.145],
                   initial=[2.3, 2.31, 2.29])
    claims = {c.name: c for c in evaluate(rows, DIGITS)}
    assert set(claims) == {"sumo_below_galore_train_loss", "sumo_svd_below_ns_train_loss",
                           "sumo_below_initial_test_loss"}  # no LM task: no LM claims
    galore = claims["sumo_below_galore_train_loss"]
    assert galore.verdict == "shown" and galore.seeds == 3 and galore.effect == pytest.approx(-0.16 / 3)
    assert claims["sumo_svd_below_ns_train_loss"].verdict == "reversed"  # NS5 lower at every seed
    trivial = claims["sumo_below_initial_test_loss"]
    assert trivial.trivial and trivial.verdict == "shown" and trivial.versus_mean == pytest.approx(2.3)


def test_noise_or_two_seeds_is_inconclusive():
    noisy = _digits(sumo=[0.20, 0.30, 0.19], galore=[0.25, 0.22, 0.24], ns=[0.2] * 3, initial=[2.3] * 3)
    assert {c.name: c for c in evaluate(noisy, DIGITS)}["sumo_below_galore_train_loss"].verdict == "inconclusive"
    two = _digits(sumo=[0.20, 0.21], galore=[0.25, 0.27], ns=[0.3, 0.3], initial=[2.3, 2.3])
    assert all(c.verdict == "inconclusive" and c.seeds == 2 for c in evaluate(two, DIGITS))


def test_lm_claims_only_for_the_optimizers_trained_and_a_diverged_one_has_no_seeds():
    lm = {s: {"adamw": {"test_loss": 4.2 + s / 50}, "sumo": {"test_loss": 4.0 + s / 100},
              INITIAL: {"test_loss": 6.2}} for s in range(3)}
    claims = {c.name: c for c in evaluate({}, [], lm, ["adamw", "sumo"])}
    assert set(claims) == {"lm_sumo_below_adamw_val_loss", "lm_sumo_below_initial_val_loss"}
    assert claims["lm_sumo_below_adamw_val_loss"].verdict == "shown"
    without_sumo = {s: {k: v for k, v in rows.items() if k != "sumo"} for s, rows in lm.items()}
    gone = {c.name: c for c in evaluate({}, [], without_sumo, ["adamw", "sumo"])}
    assert gone["lm_sumo_below_adamw_val_loss"].seeds == 0 and gone["lm_sumo_below_adamw_val_loss"].verdict == "inconclusive"


def _run(name, lr, seed, auc, val, initial=6.0):
    return {"optimizer": name, "lr": lr, "seed_index": seed, "diverged": False, "mean_train_loss": auc,
            "final_train_loss": auc, "final_test_loss": val, "val_perplexity": None, "final_test_accuracy": None,
            "initial_test_loss": initial + seed, "state_floats": 10, "state_floats_formula": 10, "state_bytes": 10,
            "limiter_fraction": None, "step_ms": 1.0, "history": {"step": [1], "train_loss": [auc]},
            "condition": {"step": [], "median": [], "max": [], "per_matrix": []}}


def test_the_lm_best_lr_is_picked_on_seed0_and_its_row_is_the_mean_over_seeds():
    # at seed 0, lr 0.1 is best; seeds 1 and 2 ran at 0.1 only, with a worse curve: the pick stays
    runs = [_run("sumo", 0.1, 0, 4.0, 4.1), _run("sumo", 0.3, 0, 4.2, 4.3),
            _run("sumo", 0.1, 1, 4.6, 4.2), _run("sumo", 0.1, 2, 4.8, 4.3)]
    lm = text_lm_summary(runs, ["sumo"])
    row = lm["rows"]["sumo"]
    assert row["best_lr"] == 0.1 and row["seeds"] == 3 and row["tuning"] == "lr grid of 2 at seed 0"
    assert row["test_loss"] == pytest.approx(4.2) and row["test_loss_std"] == pytest.approx(0.1)
    assert lm["seed_rows"] == {s: {"sumo": {"mean_train_loss": auc, "test_loss": val}, INITIAL: {"test_loss": 6.0 + s}}
                               for s, auc, val in ((0, 4.0, 4.1), (1, 4.6, 4.2), (2, 4.8, 4.3))}
    # every seed weighs in where every lr ran every seed (digits): 0.3 wins on the mean
    assert summarize(runs + [_run("sumo", 0.3, s, 4.25, 4.3) for s in (1, 2)], None, ["sumo"])["sumo"]["best_lr"] == 0.3


def test_seed_rows_skip_other_lrs_and_diverged_runs():
    diverged = _run("adamw", 0.01, 1, 1.0, 1.0) | {"diverged": True}
    runs = [_run("adamw", 0.01, 0, 1.0, 1.1), _run("adamw", 0.03, 0, 0.9, 1.2), diverged]
    assert seed_rows(runs, {"adamw": {"best_lr": 0.01}}) == {0: {"adamw": {"mean_train_loss": 1.0, "test_loss": 1.1},
                                                                 INITIAL: {"test_loss": 6.0}}}
