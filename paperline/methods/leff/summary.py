"""The comparison table and the paper's claims, computed from this run's rounds."""
from __future__ import annotations

import numpy as np

from paperline.methods.leff.config import LEFFConfig, runs_planned
from paperline.methods.leff.fed import MethodRun
from paperline.metrics import MethodMetrics

METHOD = "leff"


def row_name(method: str, alpha: float, alphas: list[float]) -> str:
    return method if len(alphas) == 1 else f"{method}@a{alpha:g}"


def _mean(values) -> float | None:
    values = [v for v in values if v is not None and np.isfinite(v)]
    return float(np.mean(values)) if values else None


def row(run: MethodRun) -> dict:
    """Final test loss/accuracy; per round and client (means over rounds): FLOPs, trained
    parameters, the straggler's wall time and FLOPs, bytes down + up; the dropped clients."""
    clients = [c for r in run.rounds for c in r["clients"]]
    return {"alpha": run.alpha, "clients": run.clients, "test_loss": run.final["test_loss"], "test_accuracy": run.final["test_accuracy"],
            "initial_test_loss": run.initial["test_loss"],
            "client_gflops": _mean(c["flops"] / 1e9 for c in clients),
            "max_client_gflops": _mean(max(c["flops"] for c in r["clients"]) / 1e9 for r in run.rounds if r["clients"]),
            "trained_params": _mean(c["trained_params"] for c in clients),
            "held_params": _mean(c["held_params"] for c in clients),
            "straggler_s": _mean(r["straggler_s"] for r in run.rounds),
            "client_s": _mean(c["wall_s"] for c in clients),
            "server_s": _mean(r["server_s"] for r in run.rounds),
            "mb_per_round": _mean((r["bytes_down"] + r["bytes_up"]) / 1e6 for r in run.rounds),
            "dropped_clients": sum(len(r["dropped"]) for r in run.rounds)}


def claims(cfg: LEFFConfig, runs: dict[tuple[str, float], MethodRun]) -> dict:
    """At each α (suffix when several): the ordering the paper reports on final test loss (lower is
    better) — FedAvg ≤ LEFF < FedLoRA, FedBitFit; importance < random, round-robin — and LEFF's
    client cost as ratios to FedAvg full fine-tuning (FLOPs, straggler time, bytes)."""
    head: dict = {}
    for alpha in cfg.alphas:
        sfx = "" if len(cfg.alphas) == 1 else f"_a{alpha:g}"
        loss = {m: runs[(m, alpha)].final["test_loss"] for m in cfg.methods if (m, alpha) in runs}
        rows = {m: row(runs[(m, alpha)]) for m in cfg.methods if (m, alpha) in runs}
        leff = "leff_importance"
        if leff not in loss:
            continue
        if "fedavg" in loss:
            head[f"claim_fedavg_at_least_leff{sfx}"] = loss["fedavg"] <= loss[leff]
            for key, name in (("client_gflops", "flops"), ("max_client_gflops", "straggler_flops"),
                              ("straggler_s", "straggler_time"), ("mb_per_round", "bytes"),
                              ("trained_params", "trained_params")):
                if rows["fedavg"][key]:
                    head[f"leff_{name}_ratio_vs_fedavg{sfx}"] = rows[leff][key] / rows["fedavg"][key]
        for other in ("fedlora", "fedbitfit", "leff_random", "leff_round_robin"):
            if other in loss:
                head[f"claim_leff_beats_{other.removeprefix('leff_')}{sfx}"] = loss[leff] < loss[other]
                head[f"loss_gap_vs_{other}{sfx}"] = loss[leff] - loss[other]
    if cfg.fail_client is not None:
        head["fault_dropped_clients"] = sum(len(r["dropped"]) for run in runs.values() for r in run.rounds)
        head["fault_runs_completed"] = all(len(run.rounds) == cfg.rounds for run in runs.values())
    return head


def method_metrics(cfg: LEFFConfig, runs: dict[tuple[str, float], MethodRun], profile: str) -> MethodMetrics:
    planned = runs_planned(cfg)
    table = {row_name(m, a, cfg.alphas): row(runs[(m, a)]) for m, a in planned}
    baseline = row_name(cfg.baseline, cfg.alphas[0], cfg.alphas)
    details = {"rounds": {row_name(m, a, cfg.alphas): [{k: v for k, v in r.items() if k != "clients"}
                                                        for r in runs[(m, a)].rounds] for m, a in planned},
               "blocks": {row_name(m, a, cfg.alphas): [[c.get("block_start") for c in r["clients"]]
                                                        for r in runs[(m, a)].rounds]
                          for m, a in planned if m.startswith("leff")}}
    return MethodMetrics(method=METHOD, profile=profile, headline=claims(cfg, runs),
                         baseline=baseline if baseline in table else None, primary_metric="test_loss",
                         higher_is_better=False, rows=table, details=details)
