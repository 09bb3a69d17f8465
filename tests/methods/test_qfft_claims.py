"""QFFT's claims from per-seed rows: paired by seed, shown / reversed / inconclusive as the seeds say."""
from __future__ import annotations

import pytest

from paperline.methods.qfft.claims import SPECS, evaluate


def _seed(qfft_acc, sft_acc, qfft_len, sft_len, base_acc=0.5, qfft_rak=0.0, sft_rak=0.0) -> dict:
    def row(acc, length, rak):
        return {"all_accuracy": acc, "all_mean_length": length, "easy_mean_length": length, "rak": rak}

    return {"base": row(base_acc, 20.0, 0.0), "sft": row(sft_acc, sft_len, sft_rak),
            "qfft": row(qfft_acc, qfft_len, qfft_rak), "sft_noise_iv": row(0.02, 100.0, 0.0),
            "qfft_noise_iv": row(qfft_acc + 0.05, qfft_len, 0.0)}


def test_specs_are_unique_and_one_is_against_the_base():
    names = [s.name for s in SPECS]
    assert len(names) == len(set(names))
    assert [s.versus for s in SPECS if s.trivial] == ["base"]


def test_shorter_and_more_robust_shown_accuracy_on_par_reversed_when_qfft_loses_the_question():
    # QFFT shorter than SFT at every seed by ~40 tokens, but answers ~0.3 fewer questions
    per_seed = {0: _seed(0.05, 0.35, 60.0, 100.0), 1: _seed(0.03, 0.30, 58.0, 99.0),
                2: _seed(0.04, 0.38, 61.0, 102.0)}
    claims = {c.name: c for c in evaluate(per_seed)}
    assert set(claims) == {s.name for s in SPECS}
    assert claims["qfft_shorter_than_sft"].verdict == "shown"
    assert claims["qfft_shorter_than_sft"].effect == pytest.approx(-40.666666, abs=1e-5)
    assert claims["qfft_accuracy_on_par_with_sft"].verdict == "reversed"
    assert claims["qfft_accuracy_above_base"].verdict == "reversed"  # 0.04 against the base's 0.5
    assert claims["qfft_noise_iv_accuracy_above_sft_noise_iv"].verdict == "shown"  # 0.10, 0.08, 0.09 against 0.02
    assert claims["qfft_rak_above_sft"].verdict == "inconclusive" and claims["qfft_rak_above_sft"].effect == 0.0


def test_a_gap_below_the_seed_spread_is_inconclusive_and_two_seeds_never_decide():
    noisy = {0: _seed(0.6, 0.3, 60.0, 100.0, qfft_rak=0.5), 1: _seed(0.1, 0.4, 60.0, 100.0, qfft_rak=-0.4),
             2: _seed(0.5, 0.35, 60.0, 100.0, qfft_rak=0.1)}
    claims = {c.name: c for c in evaluate(noisy)}
    assert claims["qfft_accuracy_on_par_with_sft"].verdict == "inconclusive"
    assert claims["qfft_rak_above_sft"].verdict == "inconclusive"
    two = {s: _seed(0.9, 0.1, 10.0, 100.0) for s in (0, 1)}
    assert all(c.verdict == "inconclusive" and c.seeds == 2 for c in evaluate(two))


def test_only_the_models_that_ran_are_claimed():
    rows = _seed(0.5, 0.4, 60.0, 100.0)
    only_sft_and_qfft = {s: {k: rows[k] for k in ("sft", "qfft")} for s in range(3)}
    assert {c.name for c in evaluate(only_sft_and_qfft)} == {
        "qfft_accuracy_on_par_with_sft", "qfft_shorter_than_sft", "qfft_shorter_than_sft_on_easy", "qfft_rak_above_sft"}


def test_a_seed_without_the_figure_drops_out_and_none_is_inconclusive():
    per_seed = {s: _seed(0.5, 0.4, 60.0, 100.0) for s in range(3)}
    for rows in per_seed.values():  # no base solved a question: no easy split anywhere
        for row in rows.values():
            del row["easy_mean_length"]
    per_seed[2]["qfft"]["easy_mean_length"] = per_seed[2]["sft"]["easy_mean_length"] = 50.0
    easy = next(c for c in evaluate(per_seed) if c.name == "qfft_shorter_than_sft_on_easy")
    assert easy.seeds == 1 and easy.verdict == "inconclusive"
    del per_seed[2]["qfft"]["easy_mean_length"]
    easy = next(c for c in evaluate(per_seed) if c.name == "qfft_shorter_than_sft_on_easy")
    assert easy.seeds == 0 and easy.effect is None and easy.verdict == "inconclusive"
