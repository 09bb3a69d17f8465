"""The SUMO comparison (metrics/sumo.json, `method_metrics`): a row per optimizer at its best
learning rate, the initial model's row (the trivial baseline), headline figures (SUMO against GaLore
and against its NS ablation, the theory check) and the paper's claims (`claims.evaluate`).

The best lr of an optimizer is the one with the lowest mean (over the tuning seeds) of
`mean_train_loss`, the average of the full-training-set loss over the logged steps: the area under
the loss curve, i.e. "lower loss per step" (the spec's expected result). An lr at which any seed
diverged is excluded. Digits: every lr at every seed; the causal LM: the lr grid at seed 0, then the
best lr at the other seeds (`tuning_seeds=1`); every optimizer swept over a grid of the same size.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from paperline.methods.sumo.claims import INITIAL, evaluate
from paperline.methods.sumo.theory import kappa_label
from paperline.metrics import MethodMetrics
from paperline.seeds import mean_over_seeds


def _mean(values: list[float]) -> float:
    return float(np.mean(values))


PRIMARY_METRIC = "mean_train_loss"  # the best lr's criterion too: lower loss per step
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
                present = [key for key in SEED_METRICS if all(r.get(key) is not None for r in seeds)]
                entry |= mean_over_seeds([{key: r[key] for key in present} for r in seeds])
            table[name][lr] = entry
    return table


def best_lr(by_lr: dict[float, dict[str, Any]]) -> float | None:
    finite = {lr: e for lr, e in by_lr.items() if not e["diverged"]}
    return min(finite, key=lambda lr: finite[lr]["mean_train_loss"]) if finite else None


def tuning_runs(runs: list[dict], tuning_seeds: int | None) -> list[dict]:
    """The runs the best lr is picked from: seeds below `tuning_seeds` (None: every seed)."""
    return runs if tuning_seeds is None else [r for r in runs if r.get("seed_index", 0) < tuning_seeds]


def best_lrs(runs: list[dict], optimizers: list[str], tuning_seeds: int | None = None) -> dict[str, float | None]:
    """{optimizer: its best lr} (None: it diverged at every lr)."""
    table = lr_table(tuning_runs(runs, tuning_seeds))
    return {name: best_lr(table.get(name, {})) for name in optimizers}


def summarize(runs: list[dict], timing: dict[str, dict[str, float]] | None,
              optimizers: list[str], tuning_seeds: int | None = None) -> dict[str, dict[str, Any]]:
    """{optimizer: row}: the comparison, each optimizer at its best lr (picked on the tuning seeds'
    runs, its row the mean over every seed run at it; scalars only)."""
    table, tuned = lr_table(runs), lr_table(tuning_runs(runs, tuning_seeds))
    rows: dict[str, dict[str, Any]] = {}
    for name in optimizers:
        by_lr, tuned_by_lr = table.get(name, {}), tuned.get(name, {})
        lr = best_lr(tuned_by_lr)
        seeds = [r for r in runs if r["optimizer"] == name and r["lr"] == lr]
        any_run = next(r for r in runs if r["optimizer"] == name)
        where = "every seed" if tuning_seeds is None else "seed " + ", ".join(map(str, range(tuning_seeds)))
        row: dict[str, Any] = {"best_lr": lr, "tuning": f"lr grid of {len(tuned_by_lr)} at {where}"}
        if lr is not None:
            best = by_lr[lr]
            row["seeds"] = best["seeds"]
            for key in SEED_METRICS:
                if key in best:
                    column = {"final_test_accuracy": "test_accuracy", "final_test_loss": "test_loss"}.get(key, key)
                    row[column], row[f"{column}_std"] = best[key], best[f"{key}_std"]
            if seeds[0].get("peak_memory_bytes") is not None:
                row["peak_memory_bytes"] = max(r["peak_memory_bytes"] for r in seeds)
        row |= {"lr_at_grid_edge": lr is not None and lr in (min(tuned_by_lr), max(tuned_by_lr)) and len(tuned_by_lr) > 1,
                "diverged_runs": sum(e["diverged"] for e in by_lr.values()),
                "state_floats": any_run["state_floats"], "state_floats_formula": any_run["state_floats_formula"],
                "state_bytes": any_run["state_bytes"]}
        if seeds and seeds[0]["limiter_fraction"] is not None:
            row["limiter_fraction"] = _mean([r["limiter_fraction"] for r in seeds])
        if timing and name in timing:
            row |= {"step_ms": timing[name]["step_ms"], "step_time_vs_adamw": timing[name]["step_time_vs_adamw"],
                    "optimizer_time_vs_adamw": timing[name]["optimizer_time_vs_adamw"]}
        rows[name] = row
    if "adamw" in rows:
        for row in rows.values():
            row["state_bytes_vs_adamw"] = row["state_bytes"] / rows["adamw"]["state_bytes"]
    return rows


def headline(rows: dict[str, dict], theory: dict) -> dict[str, Any]:
    out: dict[str, Any] = {}

    def ratio(a: str, b: str, key: str) -> float | None:
        if a in rows and b in rows and rows[a].get(key) is not None and rows[b].get(key):
            return rows[a][key] / rows[b][key]
        return None

    out["sumo_over_galore_mean_train_loss"] = ratio("sumo", "galore_adamw", "mean_train_loss")
    out["sumo_over_galore_final_train_loss"] = ratio("sumo", "galore_adamw", "final_train_loss")
    out["sumo_svd_over_ns_mean_train_loss"] = ratio("sumo", "sumo_ns", "mean_train_loss")
    out["sumo_over_galore_state_bytes"] = ratio("sumo", "galore_adamw", "state_bytes")
    if any("val_perplexity" in row for row in rows.values()):
        out["sumo_over_galore_val_perplexity"] = ratio("sumo", "galore_adamw", "val_perplexity")
    ns_key = next(k for k in theory if k.startswith("ns") and k.endswith("_error_mean"))
    k = ns_key[2:].split("_")[0]
    out[f"ns{k}_error_at_kappa_{kappa_label(theory['kappa'][0])}"] = theory[ns_key][0]
    out[f"ns{k}_error_at_kappa_{kappa_label(theory['kappa'][-1])}"] = theory[ns_key][-1]
    out["svd_error_max_over_kappa"] = max(theory["svd_error_max"])
    return out


LM_BASELINES = ("adamw", "galore_adamw", "muon")


def text_lm_summary(runs: list[dict], optimizers: list[str]) -> dict[str, Any]:
    """The causal-LM task: `summarize`'s row per optimizer at its best lr (the same criterion as on
    digits: lowest mean training loss over the run; `test_loss` is the held-out loss), SUMO's moment
    condition numbers at its best lr (median over training of the per-step median over matrices,
    max over training of the per-step max, and both at the last sample), and the headline: SUMO's
    held-out loss over each baseline's, each at its own best lr. The best lr is picked on seed 0
    (the flow runs the grid there, then the best lr at the other seeds)."""
    rows = summarize(runs, None, optimizers, tuning_seeds=1)
    for name, row in rows.items():
        seeds = [r for r in runs if r["optimizer"] == name and r["lr"] == row["best_lr"]]
        if seeds:
            row["run_step_ms"] = _mean([r["step_ms"] for r in seeds])
        samples = [r["condition"] for r in seeds if r["condition"]["step"]]
        if samples:
            row["moment_condition_median"] = _mean([float(np.median(c["median"])) for c in samples])
            row["moment_condition_max"] = max(max(c["max"]) for c in samples)
            row["moment_condition_last_median"] = _mean([c["median"][-1] for c in samples])
            row["moment_condition_last_max"] = max(c["max"][-1] for c in samples)
    headline: dict[str, Any] = {}
    sumo = rows.get("sumo", {}).get("test_loss")
    for base in LM_BASELINES:
        other = rows.get(base, {}).get("test_loss")
        if base in rows and "sumo" in rows:
            headline[f"lm_sumo_over_{base}_val_loss"] = sumo / other if sumo is not None and other else None
    for key in ("moment_condition_median", "moment_condition_max"):
        if key in rows.get("sumo", {}):
            headline[f"lm_sumo_{key}"] = rows["sumo"][key]
    return {"rows": rows, "headline": headline,
            "by_lr": {name: {f"{lr:g}": e for lr, e in by_lr.items()} for name, by_lr in lr_table(runs).items()},
            "seed_rows": seed_rows(runs, rows)}


def seed_rows(runs: list[dict], rows: dict[str, dict]) -> dict[int, dict[str, dict[str, float]]]:
    """{seed: {optimizer: its run's figures at the optimizer's best lr, "initial": the initial
    model's test loss}}: what the claims pair by seed. The initial model of a seed is the same for
    every optimizer (one init seed), so it is read from any of that seed's runs."""
    out: dict[int, dict[str, dict[str, float]]] = defaultdict(dict)
    for run in runs:
        if run["diverged"] or run["lr"] != rows.get(run["optimizer"], {}).get("best_lr"):
            continue
        s = run.get("seed_index", 0)
        # None where a run has no test loss (the claims drop what is not finite): typed as the rows' floats
        test_loss: Any = run.get("final_test_loss")
        out[s][run["optimizer"]] = {"mean_train_loss": run["mean_train_loss"], "test_loss": test_loss}
        if run.get("initial_test_loss") is not None:
            out[s][INITIAL] = {"test_loss": run["initial_test_loss"]}
    return dict(out)


def initial_row(seeds: dict[int, dict[str, dict[str, float]]]) -> dict[str, Any] | None:
    """The initial model's row: its test loss, mean and sample std over the seeds."""
    per_seed = [rows[INITIAL] for rows in seeds.values() if INITIAL in rows]
    return mean_over_seeds(per_seed) | {"seeds": len(per_seed)} if per_seed else None


def theory_table(theory: dict) -> dict[str, dict[str, float]]:
    """The Newton–Schulz-vs-SVD check as a table: a row per κ, a column per error statistic."""
    columns = [k for k, v in theory.items() if isinstance(v, list) and k != "kappa"]
    return {f"kappa_{kappa_label(kappa)}": {"kappa": kappa, **{c: theory[c][i] for c in columns}}
            for i, kappa in enumerate(theory["kappa"])}


def method_metrics(rows: dict[str, dict], runs: list[dict], theory: dict, profile: str,
                   text_lm: dict[str, Any] | None = None) -> MethodMetrics:
    """metrics/sumo.json from `summarize`'s rows: a row per optimizer at its best lr (each on that
    optimizer's MLflow run, under which its lr runs nest), against GaLore-AdamW, the paper's main
    comparison (AdamW when GaLore is not run); primary metric the mean training loss over the run
    (lower loss per step). Headline: SUMO against GaLore and its NS ablation, the theory check's end
    points. Tables: the theory check per κ. Details: every lr's seed statistics. `text_lm`
    (text_lm_summary's): its rows as the table text_lm, its headline beside the digits one."""
    by_lr = lr_table(runs)
    digits_seeds = seed_rows(runs, rows)
    lm_seeds = text_lm["seed_rows"] if text_lm is not None else {}  # the initial model: the trivial baseline
    tables = {"newton_schulz_vs_svd": theory_table(theory)}
    details = {"by_lr": {name: {f"{lr:g}": entry for lr, entry in by_lr.get(name, {}).items()} for name in rows}}
    if text_lm is not None:
        initial = initial_row(lm_seeds)
        tables["text_lm"] = text_lm["rows"] | ({INITIAL: initial} if initial else {})
        details["text_lm_by_lr"] = text_lm["by_lr"]
    initial = initial_row(digits_seeds)
    return MethodMetrics(
        method="sumo", profile=profile, headline=headline(rows, theory) | (text_lm["headline"] if text_lm else {}),
        baseline="galore_adamw" if "galore_adamw" in rows else "adamw",
        # an optimizer that diverged at every lr has no loss: null in its row
        primary_metric=PRIMARY_METRIC, higher_is_better=False,
        rows={name: {PRIMARY_METRIC: None} | row for name, row in rows.items()}
        | ({INITIAL: {PRIMARY_METRIC: None} | initial} if initial else {}),
        tables=tables, details=details | {"theory_moments": {"rank": theory["rank"], "cols": theory["cols"]}},
        claims=evaluate(digits_seeds, list(rows), lm_seeds if text_lm is not None else None,
                        list(text_lm["rows"]) if text_lm is not None else None))
