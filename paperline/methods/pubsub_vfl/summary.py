"""The comparison table (each variant's row the mean over its seeds), the figures a reader looks at
first, and the paper's claims (claims.py), computed from this run's experiment."""
from __future__ import annotations

from dataclasses import asdict

import numpy as np

from paperline.methods.pubsub_vfl import claims
from paperline.methods.pubsub_vfl.config import PubSubVFLConfig
from paperline.methods.pubsub_vfl.experiment import DP_CLAIM_MU, Experiment
from paperline.methods.pubsub_vfl.train import RunResult
from paperline.metrics import MethodMetrics
from paperline.seeds import mean_over_seeds

METHOD = "pubsub_vfl"
# summed over seeds, not averaged (buffer_overflow: channel entries pushed out of a full p or q buffer)
COUNTS = ("dropped_batches", "reassigned_batches", "retrained_batches", "buffer_overflow")


def metric_name(task: str) -> str:
    return "auc" if task == "classification" else "rmse"


def seed_row(r: RunResult, name: str) -> dict:
    """What one run measured (time to target None when it never got there)."""
    return {name: r.metric, "wall_s": r.wall_s, "time_to_target_s": r.time_to_target_s,
            "idle_fraction": (r.idle_fraction["active"] + r.idle_fraction["passive"]) / 2,
            "idle_fraction_active": r.idle_fraction["active"], "idle_fraction_passive": r.idle_fraction["passive"],
            "cpu_utilisation": r.cpu_utilisation, "busy_fraction": r.busy_fraction, "dropped_batches": r.dropped,
            "reassigned_batches": r.reassigned, "retrained_batches": r.retrained,
            "buffer_overflow": r.overflow,
            "workers_active": r.workers_active, "workers_passive": r.workers_passive, "batch_size": r.batch_size}


def seed_rows(exp: Experiment, task: str) -> dict[int, dict[str, dict]]:
    """{seed: {variant: row}}: every variant, the active party alone, PubSub-VFL at the claim's μ."""
    name = metric_name(task)
    out: dict[int, dict[str, dict]] = {}
    for variant, runs in exp.runs.items():
        for r in runs:
            out.setdefault(r.seed, {})[variant] = seed_row(r, name)
    for seed, metric in exp.alone.items():
        out.setdefault(seed, {})[claims.ALONE] = {name: metric}
    for r in exp.dp:
        if r.dp_mu == DP_CLAIM_MU:
            out.setdefault(r.seed, {})[claims.DP_VARIANT] = seed_row(r, name)
    return out


def _mean_row(rows: list[dict], name: str) -> dict:
    """The mean over seeds (spread of the metric, wall time and waiting); time to target only when
    every seed reached it; dropped, reassigned and retrained batches and buffer overflow summed."""
    reached = [r["time_to_target_s"] for r in rows if r.get("time_to_target_s") is not None]
    timed = [{k: v for k, v in r.items() if k not in ("time_to_target_s", *COUNTS)} for r in rows]
    out = mean_over_seeds(timed, spread=lambda k: k in (name, "wall_s", "idle_fraction"), keep_shared=True)
    if "wall_s" in out:
        out |= {"time_to_target_s": float(np.mean(reached)) if len(reached) == len(rows) else None,
                "reached_target": len(reached)} | {k: sum(r.get(k, 0) for r in rows) for k in COUNTS}
    return out | {"seeds": len(rows)}


def rows(exp: Experiment, task: str) -> dict[str, dict]:
    """One row per variant (and the active party alone, PubSub-VFL at the claim's μ where it ran at
    every seed): the mean over seeds, with the spread (sample std) of the metric, wall time, waiting."""
    return _rows(exp, task, seed_rows(exp, task))


def _rows(exp: Experiment, task: str, per_seed: dict[int, dict[str, dict]]) -> dict[str, dict]:
    """`rows`, from `seed_rows(exp, task)`."""
    name = metric_name(task)
    variants = list(exp.runs) + [claims.ALONE] + ([claims.DP_VARIANT] if len({r.seed for r in exp.dp if r.dp_mu == DP_CLAIM_MU}) > 1 else [])
    out = {}
    for variant in variants:
        runs = [per_seed[s][variant] for s in sorted(per_seed) if variant in per_seed[s]]
        if runs:
            out[variant] = _mean_row(runs, name)
    return out


def headline(cfg: PubSubVFLConfig, table: dict[str, dict], exp: Experiment, task: str,
             per_seed: dict[int, dict[str, dict]]) -> dict:
    """Figures (the verdicts are the claims): first the time to the target of the baseline that
    reaches it soonest over PubSub-VFL's (means over seeds, given every seed reached it; the best
    baseline is the claims' own, `claims.best_baseline` on the per-seed rows); PubSub-VFL's
    idle fraction over each baseline's and each baseline's wall time over PubSub-VFL's; its metric minus the best
    baseline's and the active party's alone; the planner's pick over the grid's best (mean over
    seeds); the metric at each DP μ (mean over the seeds that ran it); the fault run's figures.
    `per_seed`: `seed_rows(exp, task)`, whose means `table` holds."""
    name, ours = metric_name(task), table.get("pubsub_vfl")
    baselines = {v: row for v, row in table.items() if v in claims.BASELINES}
    head: dict = {}
    if ours is None or not baselines:
        return head
    soonest = claims.best_baseline(per_seed, "time_to_target_s", higher=False)
    if soonest is not None and ours.get("time_to_target_s") and table[soonest].get("time_to_target_s"):
        head["time_to_target_speedup_vs_best_baseline"] = table[soonest]["time_to_target_s"] / ours["time_to_target_s"]
        head["time_to_target_best_baseline"] = soonest
    for v, row in baselines.items():
        head[f"idle_ratio_vs_{v}"] = ours["idle_fraction"] / row["idle_fraction"] if row["idle_fraction"] else None
        head[f"speedup_vs_{v}"] = row["wall_s"] / ours["wall_s"] if ours["wall_s"] else None
    best = claims.best_baseline(per_seed, name, higher=task == "classification")
    if best is not None:
        head[f"{name}_gap_vs_best_baseline"] = ours[name] - table[best][name]
    if claims.ALONE in table:
        head[f"{name}_gap_vs_active_alone"] = ours[name] - table[claims.ALONE][name]
    if exp.grid:
        planner = claims.planner_values(exp.grid, exp.plan)
        if planner:
            head["planner_vs_grid_optimum"] = float(np.mean([v["pick_over_best"] for v in planner.values()]))
    for mu in cfg.dp_mu:
        values = [r.metric for r in exp.dp if r.dp_mu == mu]
        if values:
            head[f"{name}_dp_mu_{mu:g}"] = float(np.mean(values))
    if exp.fault is not None:
        head["fault_run_completed"] = True
        head["fault_dropped_batches"] = exp.fault.dropped
        head["fault_dead_workers"] = sum(len(v) for v in exp.fault.dead_workers.values())
    return head


def grid_table(grid: list[dict]) -> dict[str, dict]:
    """The measured grid, a row per point: the mean over seeds of its epoch time (with spread)."""
    points: dict[str, list[dict]] = {}
    for g in grid:
        points.setdefault(f"wa{g['w_a']}_wp{g['w_p']}_B{g['B']}", []).append({k: v for k, v in g.items() if k != "seed"})
    return {key: mean_over_seeds(rows, spread=lambda k: k == "measured_epoch_s", keep_shared=True) | {"seeds": len(rows)}
            for key, rows in points.items()}


def method_metrics(cfg: PubSubVFLConfig, exp: Experiment, task: str, profile: str) -> MethodMetrics:
    per_seed = seed_rows(exp, task)
    table = _rows(exp, task, per_seed)
    details = {"plan": exp.plan, "grid": exp.grid, "active_alone": exp.alone,
               "delta_t": exp.delta_t,
               "dp": [{"mu": r.dp_mu, "seed": r.seed, "metric": r.metric, "wall_s": r.wall_s} for r in exp.dp],
               "fault": None if exp.fault is None else {k: v for k, v in asdict(exp.fault).items() if k not in ("curve", "params")},
               "curves": {v: [r.curve for r in runs] for v, runs in exp.runs.items()}}
    tables = {"planner_grid": grid_table(exp.grid)} if exp.grid else {}
    if exp.delta_t:  # ΔT's effect: one row per ΔT₀ (the first seed)
        tables["delta_t_sweep"] = {f"delta_t0_{d['delta_t0']}": {(metric_name(task) if k == "metric" else k): v
                                                                 for k, v in d.items()} for d in exp.delta_t}
    return MethodMetrics(method=METHOD, profile=profile, headline=headline(cfg, table, exp, task, per_seed),
                         baseline=cfg.baseline if cfg.baseline in table else None, primary_metric=metric_name(task),
                         higher_is_better=task == "classification", rows=table, tables=tables, details=details,
                         claims=claims.evaluate(per_seed, task, exp.grid, exp.plan))
