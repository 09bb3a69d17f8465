"""The SUMO comparison table (metrics/sumo.json): a row per optimizer at its best learning rate,
and headline numbers (SUMO against GaLore and against its NS ablation, the theory check).

The best lr of an optimizer is the one with the lowest mean (over seeds) of `mean_train_loss`, the
average of the full-training-set loss over the logged steps: the area under the loss curve, i.e.
"lower loss per step" (the spec's expected result). An lr at which any seed diverged is excluded.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from paperline.methods.sumo.theory import kappa_label


def _mean(values: list[float]) -> float:
    return float(np.mean(values))


def _std(values: list[float]) -> float:
    return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


SEED_METRICS = ("mean_train_loss", "final_train_loss", "final_test_loss", "final_test_accuracy", "val_perplexity")


def lr_table(runs: list[dict]) -> dict[str, dict[float, dict[str, Any]]]:
    """{optimizer: {lr: {<metric> (mean over seeds), <metric>_std, seeds, diverged}}} for the
    SEED_METRICS the runs report (digits: test loss/accuracy; LLaMA-C4: validation loss/perplexity)."""
    grouped: dict[str, dict[float, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        grouped[run["optimizer"]][run["lr"]].append(run)
    table: dict[str, dict[float, dict[str, Any]]] = {}
    for name, by_lr in grouped.items():
        table[name] = {}
        for lr, seeds in sorted(by_lr.items()):
            diverged = sum(r["diverged"] for r in seeds)
            entry: dict[str, Any] = {"seeds": len(seeds), "diverged": diverged}
            if not diverged:
                for key in SEED_METRICS:
                    if all(r.get(key) is not None for r in seeds):
                        entry[key] = _mean([r[key] for r in seeds])
                        entry[f"{key}_std"] = _std([r[key] for r in seeds])
            table[name][lr] = entry
    return table


def best_lr(by_lr: dict[float, dict[str, Any]]) -> float | None:
    finite = {lr: e for lr, e in by_lr.items() if not e["diverged"]}
    return min(finite, key=lambda lr: finite[lr]["mean_train_loss"]) if finite else None


def summarize(runs: list[dict], theory: dict, timing: dict[str, dict[str, float]] | None,
              optimizers: list[str]) -> dict:
    table = lr_table(runs)
    summary: dict[str, Any] = {}
    for name in optimizers:
        by_lr = table.get(name, {})
        lr = best_lr(by_lr)
        seeds = [r for r in runs if r["optimizer"] == name and r["lr"] == lr]
        any_run = next(r for r in runs if r["optimizer"] == name)
        row: dict[str, Any] = {"best_lr": lr}
        if lr is not None:
            best = by_lr[lr]
            for key in SEED_METRICS:
                if key in best:
                    column = {"final_test_accuracy": "test_accuracy", "final_test_loss": "test_loss"}.get(key, key)
                    row[column], row[f"{column}_std"] = best[key], best[f"{key}_std"]
            if seeds[0].get("peak_memory_bytes") is not None:
                row["peak_memory_bytes"] = max(r["peak_memory_bytes"] for r in seeds)
        row |= {"lr_at_grid_edge": lr is not None and lr in (min(by_lr), max(by_lr)) and len(by_lr) > 1,
                "diverged_runs": sum(e["diverged"] for e in by_lr.values()),
                "state_floats": any_run["state_floats"], "state_floats_formula": any_run["state_floats_formula"],
                "state_bytes": any_run["state_bytes"]}
        if seeds and seeds[0]["limiter_fraction"] is not None:
            row["limiter_fraction"] = _mean([r["limiter_fraction"] for r in seeds])
        if timing and name in timing:
            row |= {"step_ms": timing[name]["step_ms"], "step_time_vs_adamw": timing[name]["step_time_vs_adamw"],
                    "optimizer_time_vs_adamw": timing[name]["optimizer_time_vs_adamw"]}
        row["by_lr"] = {f"{lr:g}": entry for lr, entry in by_lr.items()}  # nested: dvc metrics / MLflow only
        summary[name] = row
    if "adamw" in summary:
        for row in summary.values():
            row["state_bytes_vs_adamw"] = row["state_bytes"] / summary["adamw"]["state_bytes"]
    summary |= headline(summary, theory)
    return summary


def headline(summary: dict, theory: dict) -> dict[str, Any]:
    out: dict[str, Any] = {}

    def ratio(a: str, b: str, key: str) -> float | None:
        if a in summary and b in summary and summary[a].get(key) is not None and summary[b].get(key):
            return summary[a][key] / summary[b][key]
        return None

    out["sumo_over_galore_mean_train_loss"] = ratio("sumo", "galore_adamw", "mean_train_loss")
    out["sumo_over_galore_final_train_loss"] = ratio("sumo", "galore_adamw", "final_train_loss")
    out["sumo_svd_over_ns_mean_train_loss"] = ratio("sumo", "sumo_ns", "mean_train_loss")
    out["sumo_over_galore_state_bytes"] = ratio("sumo", "galore_adamw", "state_bytes")
    if any(isinstance(row, dict) and "val_perplexity" in row for row in summary.values()):
        out["sumo_over_galore_val_perplexity"] = ratio("sumo", "galore_adamw", "val_perplexity")
    ns_key = next(k for k in theory if k.startswith("ns") and k.endswith("_error_mean"))
    k = ns_key[2:].split("_")[0]
    out[f"ns{k}_error_at_kappa_{kappa_label(theory['kappa'][0])}"] = theory[ns_key][0]
    out[f"ns{k}_error_at_kappa_{kappa_label(theory['kappa'][-1])}"] = theory[ns_key][-1]
    out["svd_error_max_over_kappa"] = max(theory["svd_error_max"])
    return out
