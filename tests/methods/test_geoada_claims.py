"""GeoAda's claims from hand-made per-seed rows, and the summary's rows as means over seeds."""
from __future__ import annotations

import pytest

from paperline.methods.geoada import claims
from paperline.methods.geoada.config import GeoAdaConfig
from paperline.methods.geoada.summary import lr_sweeps, method_metrics


def _row(ade: float, original_ade: float = 0.35, equivariance: float = 1e-14, original_on_ade: float | None = None
         ) -> dict:
    return {"ade": ade, "original_ade": original_ade, "equivariance_error": equivariance,
            "original_on_ade": original_ade if original_on_ade is None else original_on_ade}


def _seed_rows(geoada: list[float], frozen: list[float], full_ft: list[float], ft_original: list[float],
               geoada_original_on: list[float] | None = None) -> dict:
    on = geoada_original_on or [0.35] * len(geoada)
    return {s: {"frame_frozen": _row(frozen[s]), "frame_full_ft": _row(full_ft[s], ft_original[s]),
                "frame_geoada": _row(geoada[s], original_on_ade=on[s])} for s in range(len(geoada))}


def test_specs_are_unique_with_a_trivial_claim_per_control():
    names = [s.name for s in claims.SPECS]
    assert len(names) == len(set(names))
    assert {s.name for s in claims.SPECS if s.trivial} == {f"geoada_below_frozen_ade_{c}"
                                                           for c in ("frame", "global", "subgraph")}


def test_geoada_that_beats_the_base_but_not_full_ft():
    rows = _seed_rows(geoada=[0.30, 0.31, 0.29], frozen=[0.35, 0.351, 0.349], full_ft=[0.25, 0.261, 0.242],
                      ft_original=[0.40, 0.41, 0.42], geoada_original_on=[0.50, 0.52, 0.51])
    got = {c.name: c for c in claims.evaluate(rows, ["frame"])}
    assert set(got) == {"geoada_below_frozen_ade_frame", "geoada_below_full_ft_ade_frame",
                        "geoada_forgets_less_than_full_ft_frame", "geoada_forgets_less_than_full_ft_on_frame",
                        "geoada_equivariant"}
    assert got["geoada_below_frozen_ade_frame"].verdict == "shown" and got["geoada_below_frozen_ade_frame"].trivial
    assert got["geoada_below_full_ft_ade_frame"].verdict == "reversed"  # full FT is better on the new task
    assert got["geoada_forgets_less_than_full_ft_frame"].verdict == "shown"  # full FT's original ADE rose
    assert got["geoada_forgets_less_than_full_ft_frame"].effect == pytest.approx(0.35 - 0.41)
    # with the adapter on, reading the original input, GeoAda did worse there than full FT: scored alike
    assert got["geoada_forgets_less_than_full_ft_on_frame"].verdict == "reversed"
    assert got["geoada_equivariant"].verdict == "exact"


def test_a_change_within_the_seed_noise_and_a_broken_symmetry():
    rows = _seed_rows(geoada=[0.34, 0.36, 0.35], frozen=[0.35, 0.35, 0.35], full_ft=[0.35, 0.35, 0.35],
                      ft_original=[0.35, 0.35, 0.35])
    rows[1]["frame_geoada"]["equivariance_error"] = 0.05
    got = {c.name: c for c in claims.evaluate(rows, ["frame"])}
    assert got["geoada_below_frozen_ade_frame"].verdict == "inconclusive"  # what nothing happening looks like
    assert got["geoada_equivariant"].verdict == "not_exact" and got["geoada_equivariant"].effect == 0.05
    two = {c.name: c for c in claims.evaluate({s: rows[s] for s in (0, 1)}, ["frame"])}
    assert all(c.verdict == "inconclusive" for c in two.values() if c.kind == "paired")


def test_claims_of_variants_that_did_not_run_are_left_out():
    rows = {s: {"frame_geoada": _row(0.3), "frame_frozen": _row(0.35)} for s in range(3)}
    assert [c.name for c in claims.evaluate(rows, ["frame"])] == ["geoada_below_frozen_ade_frame", "geoada_equivariant"]


def _result(control: str, variant: str, seed: int, ade: float, original: dict | None = None,
            original_on: dict | None = None) -> dict:
    figures = {"ade": ade, "fde": 2 * ade, "min_ade": ade / 2, "min_fde": ade}
    return {"control": control, "variant": variant, "seed": seed, "new_task": figures, "original_task": original,
            "original_task_on": original_on,
            "trainable": 0 if variant == "frozen" else 10, "train_seconds": 1.0, "equivariance_error": 1e-14,
            "steps": [] if variant == "frozen" else [10, 20], "loss": [] if variant == "frozen" else [1.0, 0.5 + seed]}


def test_rows_are_means_over_seeds_and_the_original_task_is_the_base_where_additions_are_off():
    cfg = GeoAdaConfig(controls=["frame"], variants=["frozen", "full_ft", "geoada"], seeds=[0, 1, 2])
    base = {s: {"ade": 0.35 + s / 100, "fde": 0.6, "min_ade": 0.3, "min_fde": 0.5} for s in range(3)}
    results = [r for s in range(3) for r in (
        _result("frame", "frozen", s, 0.35),
        _result("frame", "geoada", s, 0.30 + s / 100, None, {"ade": 0.38, "fde": 0.7, "min_ade": 0.3, "min_fde": 0.5}),
        _result("frame", "full_ft", s, 0.25, {"ade": 0.45, "fde": 0.7, "min_ade": 0.4, "min_fde": 0.6}))]
    metrics = method_metrics(cfg, results, {"original_task": base, "trainable": 1, "train_seconds": 1.0,
                                            "final_loss": 0.1}, "tiny")
    geo = metrics.rows["frame_geoada"]
    assert geo["ade"] == pytest.approx(0.31) and geo["ade_std"] == pytest.approx(0.01)  # sample std
    assert geo["original_ade"] == pytest.approx(0.36) and geo["original_is_base"] and geo["seeds"] == 3
    assert geo["original_on_ade"] == pytest.approx(0.38) and geo["original_on_ade_change"] > 0
    ft = metrics.rows["frame_full_ft"]
    assert ft["original_ade"] == pytest.approx(0.45) and ft["original_on_ade"] == ft["original_ade"]  # the same model
    assert metrics.headline["frame_geoada_original_on_ade_change"] == pytest.approx(geo["original_on_ade_change"])
    assert metrics.tables["seeds"]["frame_geoada seed2"]["original_ade"] == pytest.approx(0.37)
    assert not any("claim" in k for k in metrics.headline)
    got = {c.name: c.verdict for c in metrics.claims}
    assert got["geoada_below_frozen_ade_frame"] == "shown" and got["geoada_forgets_less_than_full_ft_frame"] == "shown"
    assert metrics.details["loss_curves"]["frame_geoada"]["loss"] == [1.0, 1.5]


def test_the_sweep_record_says_which_chosen_rate_is_still_on_an_edge():
    results = [_result("frame", "geoada", 0, 0.3) | {"lr": 0.032, "sweep": {"0.002": 0.5, "0.008": 0.4, "0.032": 0.3}},
               _result("frame", "full_ft", 0, 0.3) | {"lr": 0.0005, "sweep": {"0.000125": 0.6, "0.0005": 0.4,
                                                                              "0.002": 0.5}},
               _result("frame", "full_ft", 1, 0.3) | {"lr": 0.0005, "sweep": {}},  # a later seed: no sweep
               _result("global", "geoada", 0, 0.3) | {"lr": 0.0005, "sweep": {"0.0005": 0.3, "0.002": 0.5}}]
    sweeps = lr_sweeps(results)
    assert {row: s["edge"] for row, s in sweeps.items()} == {"frame_geoada": "highest", "frame_full_ft": None,
                                                              "global_geoada": "lowest"}
    assert sweeps["frame_full_ft"] == {"chosen": 0.0005, "edge": None,
                                       "validation_loss": {"0.000125": 0.6, "0.0005": 0.4, "0.002": 0.5}}
