"""The whole comparison in one process, sequentially (the variants share two cores: run side by
side they would slow each other and the timings would compare nothing): the planner's profile and
pick, every variant × seed, the active party alone (the trivial baseline) at every seed, the DP
sweep (every μ at the first seed, the claim's μ at every seed), the planner against the measured
grid at every seed, the fault run. Given a records folder (the run directory), the plan and every
finished run are kept there, so a killed experiment resumes past them with the plan it had measured.
Given a models folder too, the final model of each comparison run and DP claim run is kept there, once,
as `<variant>/seed<s>.pkl` (what a user looks for): its run's record holds a reference to it (path
and digest), not a second copy."""
from __future__ import annotations

import hashlib
import pickle
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from paperline.io import atomic_path, json_digest
from paperline.methods.pubsub_vfl import planner
from paperline.methods.pubsub_vfl.alone import active_alone
from paperline.methods.pubsub_vfl.claims import DP_VARIANT
from paperline.methods.pubsub_vfl.config import PubSubVFLConfig
from paperline.methods.pubsub_vfl.data import VFLData
from paperline.methods.pubsub_vfl.train import RunResult, run_variant
from paperline.train.records import finished_unit, read_unit, write_unit

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


def model_file(name: str, seed: int) -> str:
    """Where, under the models folder, a run's final model is kept: `name` its variant's."""
    return f"{name}/seed{seed}.pkl"


def _digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def run_record(run_cfg: PubSubVFLConfig, variant: str, seed: int, data_version: str,
               settings: dict[str, Any]) -> tuple[str, dict]:
    """A run's record name (under the records folder) and fingerprint: from the whole config it runs
    with (not the experiment's, patched), its variant, seed and `settings` (run_variant's keywords),
    so two runs that differ in anything never share a record."""
    unit = {"variant": variant, "seed": seed, "config": run_cfg.model_dump(mode="json"), **settings}
    return f"runs/{variant}-seed{seed}-{json_digest(unit)}.pkl", {"data": data_version, "unit": unit}


def kept_with_model(record: Path, fingerprint: dict, model: Path, compute: Callable[[], RunResult]) -> RunResult:
    """A run recorded at `record` whose final model (`params`) is kept at `model` alone: the record
    holds the run without it and the model file's digest. Read back only when both are there and
    the file is the one recorded (a killed later run of other settings may have replaced it); else
    computed, the model written before the record, each atomically, so a kill between them leaves a
    run that is computed again, never a record without its model."""
    saved = read_unit(record, fingerprint)
    if saved is not None and model.is_file() and _digest(raw := model.read_bytes()) == saved["model_sha256"]:
        return replace(saved["run"], params=pickle.loads(raw))
    result = compute()
    raw = pickle.dumps(result.params)
    with atomic_path(model) as tmp:
        tmp.write_bytes(raw)
    write_unit(record, fingerprint, {"run": replace(result, params=None), "model_sha256": _digest(raw)})
    return result


def choose(cfg: PubSubVFLConfig, data: VFLData) -> dict:
    if not cfg.plan:
        return {"w_a": cfg.workers_active, "w_p": cfg.workers_passive, "B": cfg.batch_size, "measured_cost_model": None}
    cost = planner.profile(cfg, len(data.y_train), data.active_train.x.shape[1], data.passive_train.x.shape[1], data.task)
    w_a, w_p, B = planner.plan(cost, cfg.plan_workers, cfg.plan_workers, cfg.plan_batches)
    return {"w_a": w_a, "w_p": w_p, "B": B, "measured_cost_model": planner.as_dict(cost),
            "predicted_epoch_s": cost.epoch_time(w_a, w_p, B)}


def run_experiment(cfg: PubSubVFLConfig, data: VFLData, log: Callable[[str], None] = lambda _: None,
                   records: Path | None = None, data_version: str = "", models: Path | None = None) -> Experiment:
    """Everything above, in order. With `records`, each unit's result (the plan, a run) is a
    finished-unit record there, fingerprinted by `data_version` and the unit's settings (a run's: the
    whole config it runs with, its seed, workers and batch size): a resumed run reads back what a
    killed one finished, never a record of other settings. The plan above all: it is
    measured, and a re-profile on a busier moment may pick another (w_a, w_p, B). With `models`, the
    final model of each comparison and DP claim run is kept there (`model_file`), not in its record,
    which holds the file's digest: `models` needs `records`."""
    if models is not None and records is None:
        raise ValueError("models are kept beside their runs' records: give `records` too")
    if records is None:
        chosen = choose(cfg, data)
    else:
        chosen = finished_unit(records / "plan.json", {"config": cfg.model_dump(mode="json"), "data": data_version,
                                                       "unit": {"plan": True}}, lambda: choose(cfg, data))
    log(f"plan: w_a={chosen['w_a']} w_p={chosen['w_p']} B={chosen['B']}")

    def one(variant: str, seed: int, run_cfg: PubSubVFLConfig = cfg, model_as: str | None = None, **kw) -> RunResult:
        """`model_as`: the name its final model is kept under in `models`; None: in its record."""
        workers = (chosen["w_a"], chosen["w_p"]) if variant in PS_VARIANTS else (1, 1)
        kw.setdefault("workers", workers)
        kw.setdefault("batch_size", chosen["B"])
        name, fingerprint = run_record(run_cfg, variant, seed, data_version, kw)

        def compute() -> RunResult:
            return run_variant(run_cfg, data, variant, seed, **kw)

        if records is not None and models is not None and model_as is not None:
            # a record of this kind is another format than a whole run's: its own fingerprint
            result = kept_with_model(records / name, fingerprint | {"model": model_file(model_as, seed)},
                                     models / model_file(model_as, seed), compute)
        elif records is not None:
            result = finished_unit(records / name, fingerprint, compute)
        else:
            result = compute()
        log(f"{variant} seed {seed}: metric {result.metric:.4f}, wall {result.wall_s:.2f} s, "
            f"idle {result.idle_fraction}, dropped {result.dropped}")
        return result

    runs: dict[str, list[RunResult]] = {v: [] for v in cfg.variants}
    for seed in cfg.run_seeds():  # seed-major: a slow spell of the machine hits every variant alike
        for variant in cfg.variants:
            runs[variant].append(one(variant, seed, model_as=variant))
    exp = Experiment(chosen, runs)
    # in process, no timing: the same model, init, lr, epochs, batches, without the passive party
    exp.alone = {seed: active_alone(cfg, data, seed, chosen["B"]) for seed in cfg.run_seeds()}
    exp.dp = [one("pubsub_vfl", seed, dp_mu=mu, model_as=DP_VARIANT if mu == DP_CLAIM_MU else None)
              for seed in cfg.run_seeds() for mu in cfg.dp_mu
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
