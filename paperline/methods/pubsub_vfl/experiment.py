"""The whole comparison in one process, sequentially (the variants share two cores: run side by
side they would slow each other and the timings would compare nothing): the planner's profile and
pick, every variant × seed, the active party alone (the trivial baseline) at every seed, the DP
sweep (every μ at the first seed, the claim's μ at every seed), the planner against the measured
grid at every seed, the fault run. Given a records folder (the run directory), the plan and every
finished run are kept there, so a killed experiment resumes past them with the plan it had measured."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from paperline.io import json_digest
from paperline.methods.pubsub_vfl import planner
from paperline.methods.pubsub_vfl.alone import active_alone
from paperline.methods.pubsub_vfl.config import PubSubVFLConfig
from paperline.methods.pubsub_vfl.data import VFLData
from paperline.methods.pubsub_vfl.train import RunResult, run_variant
from paperline.train.records import finished_unit

PS_VARIANTS = ("vfl_ps", "avfl_ps", "pubsub_vfl")
DP_CLAIM_MU = 1.0  # the paper: accuracy holds from μ = 1 on; this μ runs at every seed (claims.py)


@dataclass
class Experiment:
    plan: dict  # w_a, w_p, B and the fitted cost model
    runs: dict[str, list[RunResult]]  # variant -> one per seed
    alone: dict[int, float] = field(default_factory=dict)  # seed -> the active party alone's test metric
    dp: list[RunResult] = field(default_factory=list)  # pubsub_vfl with noise (RunResult.dp_mu, .seed)
    grid: list[dict] = field(default_factory=list)  # measured epoch time per (seed, w_a, w_p, B)
    delta_t: list[dict] = field(default_factory=list)  # pubsub_vfl at each ΔT₀ of the sweep, first seed
    fault: RunResult | None = None


def choose(cfg: PubSubVFLConfig, data: VFLData) -> dict:
    if not cfg.plan:
        return {"w_a": cfg.workers_active, "w_p": cfg.workers_passive, "B": cfg.batch_size, "measured_cost_model": None}
    cost = planner.profile(cfg, len(data.y_train), data.active_train.x.shape[1], data.passive_train.x.shape[1], data.task)
    w_a, w_p, B = planner.plan(cost, cfg.plan_workers, cfg.plan_workers, cfg.plan_batches)
    return {"w_a": w_a, "w_p": w_p, "B": B, "measured_cost_model": planner.as_dict(cost),
            "predicted_epoch_s": cost.epoch_time(w_a, w_p, B)}


def run_experiment(cfg: PubSubVFLConfig, data: VFLData, log: Callable[[str], None] = lambda _: None,
                   records: Path | None = None, data_version: str = "") -> Experiment:
    """Everything above, in order. With `records`, each unit's result (the plan, a run) is a
    finished-unit record there, fingerprinted by the config, `data_version` and the unit's own
    settings: a resumed run reads back what a killed one finished. The plan above all: it is
    measured, and a re-profile on a busier moment may pick another (w_a, w_p, B)."""
    base = {"config": cfg.model_dump(mode="json"), "data": data_version}

    def kept(name: str, unit: dict[str, Any], compute: Callable[[], Any]) -> Any:
        if records is None:
            return compute()
        return finished_unit(records / name, base | {"unit": unit}, compute)

    chosen = kept("plan.json", {"plan": True}, lambda: choose(cfg, data))
    log(f"plan: w_a={chosen['w_a']} w_p={chosen['w_p']} B={chosen['B']}")

    def one(variant: str, seed: int, run_cfg: PubSubVFLConfig = cfg, **kw) -> RunResult:
        workers = (chosen["w_a"], chosen["w_p"]) if variant in PS_VARIANTS else (1, 1)
        kw.setdefault("workers", workers)
        kw.setdefault("batch_size", chosen["B"])
        unit = {"variant": variant, "seed": seed, "epochs": run_cfg.epochs, **kw}
        if run_cfg.delta_t0 != cfg.delta_t0:
            unit["delta_t0"] = run_cfg.delta_t0
        result = kept(f"runs/{variant}-seed{seed}-{json_digest(unit)}.pkl", unit,
                      lambda: run_variant(run_cfg, data, variant, seed, **kw))
        log(f"{variant} seed {seed}: metric {result.metric:.4f}, wall {result.wall_s:.2f} s, "
            f"idle {result.idle_fraction}, dropped {result.dropped}")
        return result

    runs: dict[str, list[RunResult]] = {v: [] for v in cfg.variants}
    for seed in cfg.run_seeds():  # seed-major: a slow spell of the machine hits every variant alike
        for variant in cfg.variants:
            runs[variant].append(one(variant, seed))
    exp = Experiment(chosen, runs)
    # in process, no timing: the same model, init, lr, epochs, batches, without the passive party
    exp.alone = {seed: active_alone(cfg, data, seed, chosen["B"]) for seed in cfg.run_seeds()}
    exp.dp = [one("pubsub_vfl", seed, dp_mu=mu) for seed in cfg.run_seeds() for mu in cfg.dp_mu
              if seed == cfg.run_seeds()[0] or mu == DP_CLAIM_MU]
    first = cfg.run_seeds()[0]
    for delta_t0 in sorted(set(cfg.delta_t0_sweep) | ({cfg.delta_t0} if cfg.delta_t0_sweep else set())):
        if delta_t0 == cfg.delta_t0 and runs.get("pubsub_vfl"):
            r = runs["pubsub_vfl"][0]  # the comparison's own run at the first seed
        else:
            r = one("pubsub_vfl", first, cfg.model_copy(update={"delta_t0": delta_t0}))
        exp.delta_t.append({"delta_t0": delta_t0, "seed": first, "workers_active": r.workers_active,
                            "metric": r.metric, "wall_s": r.wall_s, "time_to_target_s": r.time_to_target_s,
                            "syncs": sum(s.get("syncs", 0) for s in r.worker_stats.get("active", {}).values())})
    if cfg.grid_check and cfg.plan:
        cost = planner.from_dict(chosen["measured_cost_model"])
        # an epoch's time is what the grid compares: `grid_epochs` of them at every seed
        grid_cfg = cfg.model_copy(update={"epochs": cfg.grid_epochs or cfg.epochs})
        for seed in cfg.run_seeds():
            for w_a in cfg.plan_workers:
                for w_p in cfg.plan_workers:
                    for B in cfg.plan_batches:
                        r = one("pubsub_vfl", seed, grid_cfg, workers=(w_a, w_p), batch_size=B)
                        exp.grid.append({"seed": seed, "w_a": w_a, "w_p": w_p, "B": B,
                                         "measured_epoch_s": r.wall_s / grid_cfg.epochs,
                                         "predicted_epoch_s": cost.epoch_time(w_a, w_p, B), "metric": r.metric})
    if cfg.kill_worker:
        typical = min(r.wall_s for r in runs.get("pubsub_vfl", [])) if runs.get("pubsub_vfl") else 1.0
        # two workers a party at least: the survivor carries on, the killed one's batches drop
        exp.fault = one("pubsub_vfl", cfg.run_seeds()[0], kill_passive_after_s=0.3 * typical,
                        workers=(max(2, chosen["w_a"]), max(2, chosen["w_p"])))
    return exp
