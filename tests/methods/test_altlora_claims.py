"""AltLoRA's claims from per-seed values: shown, reversed and inconclusive on hand-made numbers, and
the summary's per-seed figures (best lr of seed 0 repeated at every seed, linear and LM, the
rescaling spread, the no-adaptation row read off the runs' first point)."""
from __future__ import annotations

import pytest

from paperline.config import load_method_config, read_params
from paperline.methods.altlora.claims import NO_ADAPTATION, SPECS, evaluate
from paperline.methods.altlora.config import AltLoRAConfig
from paperline.methods.altlora.summary import linear_rows, lm_rows, method_metrics, seed_rows
from tests.conftest import CHECKOUT

OPTIMIZERS = ["lora_adamw", "altlora", "altlora_plus"]


def _linear(altlora, adamw, spread_altlora, spread_adamw, untouched=10.0) -> dict:
    return {s: {"altlora": {"final_error": altlora[s], "c_spread": spread_altlora[s]},
                "lora_adamw": {"final_error": adamw[s], "c_spread": spread_adamw[s]},
                "altlora_plus": {"final_error": adamw[s] + 0.01 + 0.001 * s, "c_spread": 1.0},
                NO_ADAPTATION: {"final_error": untouched}} for s in range(len(altlora))}


def test_specs_are_unique_and_each_task_faces_doing_nothing():
    names = [s.name for s in SPECS]
    assert len(names) == len(set(names))
    assert [s.name for s in SPECS if s.trivial] == ["altlora_below_no_adaptation_error",
                                                    "lm_altlora_below_base_val_loss"]


def test_linear_claims_shown_reversed_and_the_lm_at_one_seed_inconclusive():
    linear = _linear(altlora=[0.003, 0.002, 0.004], adamw=[0.04, 0.05, 0.045],
                     spread_altlora=[1.1, 1.2, 1.15], spread_adamw=[90.0, 80.0, 100.0])
    lm = {0: {"altlora": {"lm_val_loss": 3.6}, "lora_adamw": {"lm_val_loss": 3.5}, NO_ADAPTATION: {"lm_val_loss": 3.9}}}
    claims = {c.name: c for c in evaluate(linear, OPTIMIZERS, lm, ["lora_adamw", "altlora"])}
    assert set(claims) == {s.name for s in SPECS}
    assert claims["altlora_below_lora_adamw_error"].verdict == "shown"
    assert claims["altlora_c_spread_below_lora_adamw"].verdict == "shown"
    assert claims["altlora_plus_below_lora_adamw_error"].verdict == "reversed"  # 0.01 above at every seed
    assert claims["altlora_below_no_adaptation_error"].verdict == "shown"
    assert claims["lm_altlora_below_lora_adamw_val_loss"].verdict == "inconclusive"  # one seed
    assert claims["lm_altlora_below_base_val_loss"].effect == pytest.approx(-0.3)


def test_noise_or_a_diverged_seed_leaves_a_claim_inconclusive():
    noisy = _linear(altlora=[0.01, 0.09, 0.01], adamw=[0.04, 0.05, 0.045], spread_altlora=[1.0] * 3,
                    spread_adamw=[1.0] * 3)
    assert {c.name: c for c in evaluate(noisy, OPTIMIZERS)}["altlora_below_lora_adamw_error"].verdict == "inconclusive"
    diverged = _linear(altlora=[0.003, None, 0.004], adamw=[0.04, 0.05, 0.045], spread_altlora=[1.1] * 3,
                       spread_adamw=[90.0] * 3)
    claim = {c.name: c for c in evaluate(diverged, OPTIMIZERS)}["altlora_below_lora_adamw_error"]
    assert claim.seeds == 2 and claim.verdict == "inconclusive"
    assert not any(c.name.startswith("lm_") for c in evaluate(diverged, OPTIMIZERS))  # no LM task run


def _run(name, seed, lr, c, error, role, rank=4):
    return {"optimizer": name, "rank": rank, "c": c, "lr": lr, "diverged": False, "final_loss": error / 10,
            "final_error": error, "relative_error": error / 5, "state_floats": 8, "state_floats_formula": 8,
            "role": role, "seed": seed, "history": {"step": [0, 10], "error": [5.0 + seed, error],
                                                    "loss": [2.0, error / 10]}}


def test_rows_are_the_mean_over_seeds_at_seed0s_best_lr():
    cfg = load_method_config(AltLoRAConfig, read_params(CHECKOUT / "params"), "altlora", "tiny",
                             ["optimizers=[lora_adamw, altlora]", "linear.scales=[1.0, 10.0]", "lm=null"], root=CHECKOUT)[1]
    runs = []
    for name, good in (("lora_adamw", 0.04), ("altlora", 0.002)):
        runs += [_run(name, 0, 0.1, 1.0, good, "best"), _run(name, 0, 0.3, 1.0, good * 3, "sweep"),
                 _run(name, 0, 0.1, 10.0, good * 2, "rescaled"),
                 _run(name, 1, 0.1, 1.0, good * 2, "best"), _run(name, 1, 0.1, 10.0, good * 2, "rescaled")]
    rows = linear_rows(cfg, runs)
    assert rows["altlora"]["best_lr"] == 0.1 and rows["altlora"]["seeds"] == 2
    assert rows["altlora"]["final_error"] == pytest.approx(0.003)  # mean of 0.002 and 0.004
    assert rows["altlora"]["c_spread"] == pytest.approx(1.5)  # seed 0: 2, seed 1: 1
    assert rows["altlora"]["tuning"] == "lr grid of 1 at seed 0"
    linear, _ = seed_rows(cfg, runs, None, None)
    assert linear[1][NO_ADAPTATION] == {"final_error": 6.0, "final_loss": 2.0, "relative_error": 1.0}
    metrics = method_metrics(cfg, rows, runs, None, "tiny")
    assert metrics.rows[NO_ADAPTATION]["final_error"] == pytest.approx(5.5)
    assert {c.name for c in metrics.claims} == {"altlora_below_lora_adamw_error", "altlora_c_spread_below_lora_adamw",
                                                "altlora_below_no_adaptation_error"}


def _lm_run(name, seed, lr, val_loss, diverged=False):
    return {"optimizer": name, "seed": seed, "lr": lr, "diverged": diverged, "val_loss": val_loss,
            "source_val_loss": val_loss + 1, "state_floats": 8, "trainable_params": 4}


def test_lm_rows_repeat_seed0s_best_lr_and_the_claims_pair_by_seed():
    cfg = load_method_config(AltLoRAConfig, read_params(CHECKOUT / "params"), "altlora", "tiny",
                             ["lm.lr_grid.lora_adamw=[0.01, 0.03]", "lm.lr_grid.altlora=[0.1, 0.3]"], root=CHECKOUT)[1]
    # seed 0's sweep picks lora_adamw 0.01 and altlora 0.3; seeds 1, 2 repeat those lrs (a run at
    # another lr, as a resumed older run might leave, is not read)
    runs = [_lm_run("lora_adamw", 0, 0.01, 3.5), _lm_run("lora_adamw", 0, 0.03, 3.6),
            _lm_run("altlora", 0, 0.1, 3.45), _lm_run("altlora", 0, 0.3, 3.4),
            _lm_run("lora_adamw", 1, 0.01, 3.52), _lm_run("lora_adamw", 2, 0.01, 3.54),
            _lm_run("altlora", 1, 0.3, 3.42), _lm_run("altlora", 2, 0.3, 3.44), _lm_run("altlora", 1, 0.1, 1.0)]
    rows = lm_rows(cfg, runs)
    assert rows["altlora"]["lm_best_lr"] == 0.3 and rows["altlora"]["lm_seeds"] == 3
    assert rows["altlora"]["lm_val_loss"] == pytest.approx(3.42)
    assert rows["altlora"]["lm_val_loss_std"] == pytest.approx(0.02)
    assert rows["lora_adamw"]["lm_source_val_loss"] == pytest.approx(4.52)
    base = {"base_target_val_loss": 3.9, "base_source_val_loss": 3.0}
    _, lm = seed_rows(cfg, [], runs, base)
    assert sorted(lm) == [0, 1, 2] and all(lm[s][NO_ADAPTATION]["lm_val_loss"] == 3.9 for s in lm)
    claims = {c.name: c for c in evaluate({}, [], lm, cfg.lm_optimizers)}
    assert claims["lm_altlora_below_lora_adamw_val_loss"].seeds == 3
    assert claims["lm_altlora_below_lora_adamw_val_loss"].verdict == "inconclusive"  # 0.1 below at every seed: no spread, the sign test at 3 seeds
    assert claims["lm_altlora_below_base_val_loss"].effect == pytest.approx(-0.48)
    diverged = [r if (r["optimizer"], r["seed"]) != ("altlora", 2) else r | {"diverged": True, "val_loss": None}
                for r in runs]
    assert lm_rows(cfg, diverged)["altlora"]["lm_seeds"] == 2  # a seed that diverged has no value
