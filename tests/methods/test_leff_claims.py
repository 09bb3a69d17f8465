"""LEFF's claims on hand-made per-seed rows, the seeded LoRA init, and the fault at the last seed."""
from __future__ import annotations

import pytest
import torch

from paperline.methods.leff.claims import PRETRAINED, SPECS, evaluate
from paperline.methods.leff.config import LEFFConfig

VARIANTS = ("fedhead", "fedavg", "fedlora", "slora", "fedbitfit", "leff_importance", "leff_random", "leff_round_robin")


def seed_rows(loss: dict[str, list[float]], flops: dict[str, float] | None = None,
              accuracy: dict[str, list[float]] | None = None) -> dict:
    flops, accuracy = flops or {}, accuracy or {}
    return {s: {v: {"test_loss": values[s], "client_gflops": flops.get(v, 1.0), "mb_per_round": flops.get(v, 1.0),
                    "simulated_round_s": flops.get(v, 1.0), "test_accuracy": accuracy.get(v, [0.5] * 3)[s]}
                for v, values in loss.items()} for s in range(len(next(iter(loss.values()))))}


def test_specs_are_unique_and_one_is_against_the_pretrained_model():
    names = [s.name for s in SPECS]
    assert len(names) == len(set(names))
    trivial = [s for s in SPECS if s.trivial]
    assert [s.versus for s in trivial] == [PRETRAINED]
    assert all(s.method == "leff_importance" and s.versus in VARIANTS + (PRETRAINED,) for s in SPECS)


def test_shown_reversed_and_inconclusive_from_seed_rows():
    loss = {PRETRAINED: [3.37, 3.37, 3.37], "fedavg": [3.350, 3.351, 3.352], "fedlora": [3.3680, 3.3670, 3.3690],
            "slora": [3.355, 3.358, 3.354], "fedbitfit": [3.3675, 3.3650, 3.3700],
            "leff_importance": [3.360, 3.362, 3.361], "leff_random": [3.355, 3.375, 3.361],
            "leff_round_robin": [3.390, 3.391, 3.389], "fedhead": [3.365, 3.366, 3.367]}
    accuracy = {"fedhead": [0.20, 0.22, 0.21], "leff_importance": [0.30, 0.31, 0.33]}
    claims = {c.name: c for c in evaluate(seed_rows(loss, {"fedavg": 10.0, "leff_importance": 7.0}, accuracy))}
    assert set(claims) == {s.name for s in SPECS}
    assert claims["leff_above_fedhead"].verdict == "shown" and claims["leff_above_fedhead"].metric == "test_accuracy"
    assert claims["leff_above_fedhead"].effect == pytest.approx((0.10 + 0.09 + 0.12) / 3)
    assert claims["leff_below_pretrained"].verdict == "shown" and claims["leff_below_pretrained"].seeds == 3
    assert claims["leff_below_pretrained"].effect == pytest.approx(-0.009)
    assert claims["leff_not_above_fedavg"].verdict == "reversed"  # FedAvg lower at every seed
    assert claims["leff_below_fedlora"].verdict == "shown"
    assert claims["leff_below_slora"].verdict == "reversed"  # SLoRA 0.004 to 0.007 lower at every seed
    assert claims["importance_below_random"].verdict == "inconclusive"  # -0.005, +0.013, 0.0: seed noise
    assert claims["importance_below_round_robin"].verdict == "shown"
    # 3 below at every seed: no spread, so the sign test judges it, and 3 seeds (p = 0.25) are too few
    assert claims["leff_client_flops_below_fedavg"].verdict == "inconclusive"
    assert claims["leff_bytes_below_fedavg"].effect == pytest.approx(-3.0)


def test_one_seed_is_never_a_verdict_and_missing_variants_are_left_out():
    loss = {PRETRAINED: [3.37], "fedavg": [3.35], "leff_importance": [3.30]}
    claims = evaluate(seed_rows(loss))
    assert {c.name for c in claims} == {"leff_below_pretrained", "leff_not_above_fedavg",
                                        "leff_client_flops_below_fedavg", "leff_bytes_below_fedavg",
                                        "leff_round_time_below_fedavg"}
    assert all(c.verdict == "inconclusive" and c.seeds == 1 for c in claims)


def test_lora_init_follows_the_run_seed_not_the_process_rng():
    from paperline.methods.leff.leff import build_model
    from paperline.nn.causal_lm import CausalLM, CausalLMConfig

    torch.manual_seed(0)
    base = CausalLM(CausalLMConfig(vocab_size=32, hidden_size=16, num_layers=2, num_heads=2, head_dim=8))

    def lora_a(seed: int) -> torch.Tensor:
        model = build_model("fedlora", base, 2, 4.0, seed)
        return torch.cat([p.flatten() for n, p in model.named_parameters() if "lora_A" in n])

    first = lora_a(1)
    torch.rand(100)  # whatever ran before in the process
    assert torch.equal(first, lora_a(1)) and not torch.equal(first, lora_a(2))


def test_the_fault_hits_the_last_seeds_run_only():
    cfg = LEFFConfig(clients=2, fail_client=1, fail_round=1, rounds=1, fail_method="leff_round_robin", seeds=[0, 1])
    assert not cfg.faulty("leff_round_robin")  # seed 0
    last = cfg.model_copy(update={"seed": 1})
    assert last.faulty("leff_round_robin") and not last.faulty("fedavg")
    assert LEFFConfig(clients=2, fail_client=1, rounds=2).faulty("fedavg")  # no seeds listed: `seed` alone


def test_every_body_trained_method_is_tuned_over_the_same_grid_and_keeps_its_best_validation_rate():
    """At the first α and seed each method but fedhead (its body frozen) runs once per grid point;
    the kept run is the grid point with the lowest validation loss (a tie: the higher accuracy), and
    the other seeds run at its lr."""
    from paperline.methods.leff.fed import MethodRun, train_planned, validation_rank

    grid = [1e-4, 3e-4, 1e-3]
    cfg = LEFFConfig(methods=["fedhead", "fedavg", "leff_importance"], lr_grid=grid, seeds=[0, 1])
    # a validation (accuracy, loss) per (method, lr): fedavg best at 1e-4 (its accuracy not the
    # best), LEFF at 1e-3 by the accuracy tie-break
    score = {("fedavg", 1e-4): (0.3, 0.9), ("fedavg", 3e-4): (0.5, 1.0), ("fedavg", 1e-3): (0.4, 1.0),
             ("leff_importance", 1e-4): (0.2, 2.0), ("leff_importance", 3e-4): (0.5, 1.2),
             ("leff_importance", 1e-3): (0.6, 1.2)}
    calls = []

    def train_run(method, alpha, seed, lr, validate):
        calls.append((method, seed, lr, validate))
        acc, loss = score.get((method, lr), (0.0, 0.0))
        return MethodRun(method, alpha, {}, seed=seed, lr=lr,
                         validation={"lr": lr, "val_loss": loss, "val_accuracy": acc} if validate else None)

    results: dict = {}
    train_planned(cfg, results, train_run, log=lambda _: None)
    for method in ("fedavg", "leff_importance"):
        assert [c[2] for c in calls if c[0] == method and c[1] == 0] == grid  # the same grid, validated
        assert all(c[3] for c in calls if c[0] == method and c[1] == 0)
    assert [(c[2], c[3]) for c in calls if c[0] == "fedhead"] == [(cfg.lr, False)] * 2  # no sweep of a frozen body
    assert results[("fedavg", 0.1, 0)].lr == 1e-4 and results[("leff_importance", 0.1, 0)].lr == 1e-3
    assert [c[2] for c in calls if c[1] == 1 and c[0] != "fedhead"] == [1e-4, 1e-3]  # seed 1 at the chosen rates
    assert [p["lr"] for p in results[("fedavg", 0.1, 0)].lr_sweep] == grid

    def choose_lr(sweep):
        return min(sweep, key=validation_rank)["lr"]

    assert choose_lr([{"lr": 1e-3, "val_accuracy": 0.5, "val_loss": 1.0},
                      {"lr": 1e-4, "val_accuracy": 0.5, "val_loss": 1.0}]) == 1e-4  # a full tie: the smaller
    # a diverged run (NaN loss) ranks last wherever it stands in the sweep, as in GeoAda's (paperline.sweep)
    for diverged_first in (True, False):
        points = [{"lr": 1e-3, "val_accuracy": 0.9, "val_loss": float("nan")},
                  {"lr": 1e-4, "val_accuracy": 0.5, "val_loss": 2.0}, {"lr": 3e-4, "val_accuracy": 0.5, "val_loss": 1.5}]
        assert choose_lr(points if diverged_first else points[::-1]) == 3e-4
    # a resumed flow reads the chosen rate back from the first seed's saved run
    resumed = {k: v for k, v in results.items() if k[2] == 0}
    calls.clear()
    train_planned(cfg, resumed, train_run, log=lambda _: None)
    assert sorted(c[2] for c in calls if c[0] != "fedhead") == [1e-4, 1e-3] and not any(c[3] for c in calls)


def test_a_best_rate_at_the_grids_edge_extends_the_sweep_past_it_by_the_grids_step():
    """Where the best rate is an end of what was tried, one more tuning run one step past it (the
    grid's own step there), up to lr_sweep_extend times; an interior best stops it."""
    from paperline.methods.leff.fed import MethodRun, train_planned

    grid = [3e-5, 1e-4, 3e-4, 1e-3]
    low = 3e-5 / (1e-4 / 3e-5)
    lower = low / (3e-5 / low)  # the step from the new edge to its neighbour, 3e-5
    cfg = LEFFConfig(methods=["fedavg", "fedlora"], lr_grid=grid, seeds=[0, 1], lr_sweep_extend=2)
    # fedavg: better the lower the rate down to `low`, worse at `lower` (one extension bracketed it,
    # the second one tried); fedlora: best at 3e-4, interior, no extension
    loss = {("fedavg", lr): 1.0 + lr * 100 for lr in grid} | {("fedavg", low): 0.9, ("fedavg", lower): 0.95} \
        | {("fedlora", lr): abs(lr - 3e-4) * 100 + 1.0 for lr in grid}
    calls = []

    def train_run(method, alpha, seed, lr, validate):
        calls.append((method, seed, lr))
        return MethodRun(method, alpha, {}, seed=seed, lr=lr,
                         validation={"lr": lr, "val_loss": loss[(method, lr)], "val_accuracy": 0.5} if validate else None)

    results: dict = {}
    train_planned(cfg, results, train_run, log=lambda _: None)
    assert [c[2] for c in calls if c[:2] == ("fedavg", 0)] == grid + [low, lower]
    assert [c[2] for c in calls if c[:2] == ("fedlora", 0)] == grid
    assert results[("fedavg", 0.1, 0)].lr == low and results[("fedavg", 0.1, 1)].lr == low
    assert [p["lr"] for p in results[("fedavg", 0.1, 0)].lr_sweep] == grid + [low, lower]
    calls.clear()
    train_planned(cfg.model_copy(update={"lr_sweep_extend": 0}), {}, train_run, log=lambda _: None)
    assert [c[2] for c in calls if c[:2] == ("fedavg", 0)] == grid  # no extension asked: the grid alone


def test_a_killed_sweep_keeps_the_tuning_runs_it_finished():
    """A tuning run a killed flow finished (`tuned`) is not trained again; each new one is handed to
    `on_tuned` (the task saves it) as soon as it ends; the choice is the same as an unbroken sweep's."""
    from paperline.methods.leff.fed import MethodRun, train_planned

    grid = [1e-4, 3e-4, 1e-3]
    cfg = LEFFConfig(methods=["fedavg"], lr_grid=grid, seeds=[0])
    loss = {1e-4: 1.2, 3e-4: 0.9, 1e-3: 1.0}
    calls, saved = [], []

    def train_run(method, alpha, seed, lr, validate):
        calls.append(lr)
        return MethodRun(method, alpha, {}, seed=seed, lr=lr,
                         validation={"lr": lr, "val_loss": loss[lr], "val_accuracy": 0.5} if validate else None)

    finished = train_run("fedavg", 0.1, 0, 1e-4, True)
    calls.clear()
    results: dict = {}
    train_planned(cfg, results, train_run, log=lambda _: None, tuned={("fedavg", 1e-4): finished},
                  on_tuned=saved.append)
    assert calls == [3e-4, 1e-3] and [r.lr for r in saved] == [3e-4, 1e-3]
    assert results[("fedavg", 0.1, 0)].lr == 3e-4
    assert [p["lr"] for p in results[("fedavg", 0.1, 0)].lr_sweep] == grid  # the kept run's score in the sweep


def test_the_report_states_each_methods_chosen_lr_its_sweep_and_an_edge_choice():
    """Each row's body_lr (none for fedhead, its body frozen), details.chosen_lr per method, the
    sweep of the first seed's kept run, and the methods whose choice is an end of the grid."""
    from paperline.methods.leff.fed import MethodRun
    from paperline.methods.leff.summary import method_metrics

    grid = [1e-4, 3e-4, 1e-3]
    cfg = LEFFConfig(methods=["fedhead", "fedavg", "fedlora"], lr_grid=grid, seeds=[0, 1], rounds=1)
    chosen = {"fedhead": cfg.lr, "fedavg": 3e-4, "fedlora": 1e-3}
    runs = {}
    for m in chosen:
        for s in (0, 1):
            sweep = [{"lr": lr, "val_loss": 1.0, "val_accuracy": 0.5} for lr in grid] if s == 0 and m != "fedhead" else None
            client = {"partition": 0, "flops": 1e9, "trained_params": 10, "held_params": 10, "wall_s": 1.0, "bytes_up": 8}
            runs[(m, 0.1, s)] = MethodRun(m, 0.1, {"round": 0, "test_loss": 2.0, "test_accuracy": 0.1},
                                          [{"round": 1, "test_loss": 1.9, "test_accuracy": 0.2, "straggler_s": 1.0,
                                            "simulated_round_s": 1.0, "bytes_down": 8, "bytes_up": 8, "server_s": 0.1,
                                            "clients": [client], "dropped": []}],
                                          clients=1, seed=s, lr=chosen[m], lr_sweep=sweep)
    metrics = method_metrics(cfg, runs, "smoke")
    assert metrics.rows["fedavg"]["body_lr"] == 3e-4 and metrics.rows["fedlora"]["body_lr"] == 1e-3
    assert metrics.rows["fedhead"]["body_lr"] is None
    assert metrics.details["chosen_lr"] == {"fedavg": 3e-4, "fedlora": 1e-3}
    assert [p["lr"] for p in metrics.details["lr_sweep"]["fedavg"]] == grid and "fedhead" not in metrics.details["lr_sweep"]
    assert metrics.details["chosen_lr_at_grid_edge"] == ["fedlora"]
