"""The comparison table (each (method, α) row the mean over its seeds), the cost ratios and the
paper's claims (claims.py), computed from this run's rounds."""
from __future__ import annotations

import numpy as np

from paperline.methods.leff import claims
from paperline.methods.leff.config import LEFFConfig, runs_planned, tunes_lr
from paperline.methods.leff.fed import MethodRun
from paperline.metrics import MethodMetrics
from paperline.seeds import mean_over_seeds
from paperline.sweep import past_edge

METHOD = "leff"
Runs = dict[tuple[str, float, int], MethodRun]


def row_name(method: str, alpha: float, alphas: list[float]) -> str:
    return method if len(alphas) == 1 else f"{method}@a{alpha:g}"


def seed_name(method: str, alpha: float, seed: int, alphas: list[float]) -> str:
    """The MLflow run and folder of one seed's run, under its row's."""
    return f"{row_name(method, alpha, alphas)}/seed{seed}"


def _mean(values) -> float | None:
    values = [v for v in values if v is not None and np.isfinite(v)]
    return float(np.mean(values)) if values else None


def row(run: MethodRun) -> dict:
    """Final test loss/accuracy; per round and client (means over rounds): FLOPs, local steps, trained
    parameters, the straggler's wall time and FLOPs, the simulated round time (the slowest client's
    FLOPs / its rate), bytes down + up; the dropped clients; SLoRA's share of its sparse update the
    rank-r start kept."""
    clients = [c for r in run.rounds for c in r["clients"]]
    return {"alpha": run.alpha, "clients": run.clients, "test_loss": run.final["test_loss"], "test_accuracy": run.final["test_accuracy"],
            "initial_test_loss": run.initial["test_loss"],
            # the body's lr (the tuned one); None for fedhead, whose body is frozen
            "body_lr": run.lr if tunes_lr(run.method) else None,
            "client_gflops": _mean(c["flops"] / 1e9 for c in clients),
            "client_steps": _mean(c.get("steps") for c in clients),  # local AdamW steps (a record before them: None)
            "max_client_gflops": _mean(max(c["flops"] for c in r["clients"]) / 1e9 for r in run.rounds if r["clients"]),
            "trained_params": _mean(c["trained_params"] for c in clients),
            "held_params": _mean(c["held_params"] for c in clients),
            "straggler_s": _mean(r["straggler_s"] for r in run.rounds),
            "simulated_round_s": _mean(r.get("simulated_round_s") for r in run.rounds),  # a record before it: None
            "client_s": _mean(c["wall_s"] for c in clients),
            "server_s": _mean(r["server_s"] for r in run.rounds),
            "mb_per_round": _mean((r["bytes_down"] + r["bytes_up"]) / 1e6 for r in run.rounds),
            "dropped_clients": sum(len(r["dropped"]) for r in run.rounds)} \
        | ({"slora_svd_kept": _mean(r.get("slora_svd_kept") for r in run.rounds)} if run.method == "slora" else {})


def pretrained_row(run: MethodRun) -> dict:
    """The trivial baseline: the global model before any round, scored like every round's."""
    return {"alpha": run.alpha, "test_loss": run.initial["test_loss"], "test_accuracy": run.initial["test_accuracy"]}


def seed_rows(cfg: LEFFConfig, runs: Runs, alpha: float) -> dict[int, dict[str, dict]]:
    """{seed: {method: row}} at `alpha`, with the pretrained model's row (read from any run of the
    seed: every method starts from the same function on the same test windows)."""
    out: dict[int, dict[str, dict]] = {}
    for (method, a, seed), run in runs.items():
        if a == alpha:
            rows = out.setdefault(seed, {})
            rows[method] = row(run)
            rows.setdefault(claims.PRETRAINED, pretrained_row(run))
    return out


def _table(cfg: LEFFConfig, runs: Runs) -> dict[str, dict]:
    """One row per (method, α): the mean over its seeds, the loss and accuracy with their spread."""
    table = {}
    for alpha in cfg.alphas:
        per_seed = seed_rows(cfg, runs, alpha)
        variants = [claims.PRETRAINED] + [m for m in cfg.methods if any(m in r for r in per_seed.values())]
        for variant in variants:
            rows = [per_seed[s][variant] for s in sorted(per_seed) if variant in per_seed[s]]
            mean = mean_over_seeds(rows, spread=lambda k: k in ("test_loss", "test_accuracy"), keep_shared=True)
            table[row_name(variant, alpha, cfg.alphas)] = mean | {"seeds": len(rows)}
    return table


def headline(cfg: LEFFConfig, table: dict[str, dict], runs: Runs) -> dict:
    """At each α (suffix when several): LEFF's client cost as ratios to FedAvg full fine-tuning
    (FLOPs, the straggler's FLOPs and time, bytes, trained parameters), from the rows' means; the
    fault check's dropped clients."""
    head: dict = {}
    for alpha in cfg.alphas:
        sfx = "" if len(cfg.alphas) == 1 else f"_a{alpha:g}"
        leff, fedavg = (table.get(row_name(m, alpha, cfg.alphas)) for m in (claims.LEFF, "fedavg"))
        if leff is None or fedavg is None:
            continue
        for key, name in (("client_gflops", "flops"), ("max_client_gflops", "straggler_flops"),
                          ("straggler_s", "straggler_time"), ("simulated_round_s", "simulated_round_time"),
                          ("mb_per_round", "bytes"),
                          ("trained_params", "trained_params")):
            if fedavg[key]:
                head[f"leff_{name}_ratio_vs_fedavg{sfx}"] = leff[key] / fedavg[key]
    if cfg.fail_client is not None:
        head["fault_dropped_clients"] = sum(len(r["dropped"]) for run in runs.values() for r in run.rounds)
        head["fault_runs_completed"] = all(len(run.rounds) == cfg.rounds for run in runs.values())
    return head


def method_metrics(cfg: LEFFConfig, runs: Runs, profile: str) -> MethodMetrics:
    planned = runs_planned(cfg)
    table = _table(cfg, runs)
    sweeps = {m: sweep for m, a, s in planned if (sweep := runs[(m, a, s)].lr_sweep) is not None}
    chosen = {m: lr for m, a, s in planned if a == cfg.alphas[0] and s == cfg.run_seeds()[0] and tunes_lr(m)
              and (lr := runs[(m, a, s)].lr) is not None}  # None: a record from before the lr tuning
    baseline = row_name(cfg.baseline, cfg.alphas[0], cfg.alphas)
    details = {"seeds": cfg.run_seeds(), "claims_alpha": cfg.alphas[0],
               "rounds": {seed_name(m, a, s, cfg.alphas): [{k: v for k, v in r.items() if k != "clients"}
                                                           for r in runs[(m, a, s)].rounds] for m, a, s in planned},
               "blocks": {seed_name(m, a, s, cfg.alphas): [[c.get("block_start") for c in r["clients"]]
                                                           for r in runs[(m, a, s)].rounds]
                          for m, a, s in planned if m.startswith("leff")},
               # the lr tuning: every grid point's validation score at the first α and seed, per method
               "lr_sweep": sweeps,
               "chosen_lr": chosen,
               # a rate still at an end of what was tried (after lr_sweep_extend's steps) may not be the
               # best one: the sweep should reach past it
               "chosen_lr_at_grid_edge": sorted(m for m, sweep in sweeps.items()
                                                if past_edge([p["lr"] for p in sweep], chosen[m]) is not None)}
    return MethodMetrics(method=METHOD, profile=profile, headline=headline(cfg, table, runs),
                         baseline=baseline if baseline in table else None, primary_metric="test_loss",
                         higher_is_better=False, rows=table, details=details,
                         claims=claims.evaluate(seed_rows(cfg, runs, cfg.alphas[0])))
