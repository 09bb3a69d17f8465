"""Tasks of the AltLoRA flow: the linear adaptation of one optimizer (its lr sweep, then the
rescaled initialisations), the LM adaptation of one (optimizer, lr), the step-time measurement,
then the report."""
from __future__ import annotations

import sys

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.methods.altlora import plots
from paperline.methods.altlora.claims import NO_ADAPTATION
from paperline.methods.altlora.config import AltLoRAConfig, OptimizerName
from paperline.methods.altlora.linear import best_run, make_problem, train_linear
from paperline.methods.altlora.summary import lm_best_runs, method_metrics, summarize
from paperline.methods.altlora.timing import step_times
from paperline.train.distributed import DistributedConfig
from paperline.train.records import finished_unit
from tasks import track
from tasks.paths import plots_dir
from tasks.publish import Report
from tasks.runners import GPU_TAG
from tasks.unit import unit

METHOD = "altlora"


def data_version(cfg: AltLoRAConfig) -> str:
    """The linear problem is generated; the LM part reads the base model, the corpus and the target
    text, checked here before any training (a folder that is not a causal LM, a missing text)."""
    if cfg.lm is None:
        return "generated"
    from paperline.methods.altlora.lm import lm_data_version

    return lm_data_version(cfg.lm)


def optimizer_runs(cfg: AltLoRAConfig, ctx: track.RunContext):
    """An MLflow child run per optimizer, open while its runs nest under it: its comparison row
    lands on it when the flow publishes."""
    return ctx.children({name: {"optimizer": name, "linear_lr_grid": cfg.linear.lr_grid[name]}
                         for name in cfg.optimizers})


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
@task(name="altlora-linear", tags=[GPU_TAG], cache_policy=NO_CACHE)
def linear_variant(cfg: AltLoRAConfig, name: OptimizerName, ctx: track.RunContext,
                   optimizer_run: track.Run) -> list[dict]:
    """Seed 0: per rank, the lr grid at c = 1; at the first rank, then the best lr under every other
    c. Every other seed (its own problem): that best lr at the first rank under every c. One nested
    MLflow run per (rank, seed) with each run's curves."""
    r0 = cfg.linear.ranks[0]
    runs, best_lr = [], None
    # what makes one run besides its own (rank, c, lr, seed): the grids only choose the runs
    shared = {"optimizer": name, "linear": cfg.linear.model_dump(mode="json", exclude={"ranks", "scales", "lr_grid"}),
              "settings": cfg.settings.model_dump(mode="json")}
    # CPU work (tiny matrices), but one training at a time like every model task; one thread:
    # 64×64 matmuls, threads cost more than they give
    with unit(ctx, threads=1) as u:
        folder = u.models / "linear" / name
        for s, seed in enumerate(cfg.run_seeds()):  # s: the seed's index, what the claims pair by
            problem = make_problem(cfg.linear, seed)
            here = folder if s == 0 else folder / f"seed{s}"  # seed 0 where one seed's records always were
            for rank in cfg.linear.ranks if s == 0 else [r0]:
                with ctx.child(f"{name}_linear_r{rank}/seed{s}", params={"optimizer": name, "rank": rank, "seed": s},
                               parent=optimizer_run) as run:
                    def one(c, lr):
                        # a finished run is kept in the run directory: a killed flow resumes past it
                        record = finished_unit(here / f"r{rank}_c{c:g}_lr{lr:g}.json",
                                               shared | {"rank": rank, "c": c, "lr": lr, "seed": seed},
                                               lambda: train_linear(name, problem, rank, c, lr, cfg.linear,
                                                                    cfg.settings, seed))
                        h = record["history"]
                        run.log_history(f"error/c{c:g}_lr{lr:g}", h["step"], h["error"])
                        run.log_history(f"loss/c{c:g}_lr{lr:g}", h["step"], h["loss"])
                        return record | {"seed": s}

                    if s == 0:
                        sweep = [one(1.0, lr) | {"role": "sweep"} for lr in cfg.linear.lr_grid[name]]
                        runs += sweep
                        best = best_run(sweep)
                        if best is None:
                            continue
                        if rank == r0:
                            best_lr = best["lr"]
                        if name == "full_ft":
                            continue
                        best["role"] = "best"
                    elif best_lr is None:  # diverged at every lr of seed 0: nothing to repeat
                        continue
                    else:
                        best = one(1.0, best_lr) | {"role": "best" if name != "full_ft" else "sweep"}
                        runs.append(best)
                        if name == "full_ft":  # no factors: nothing to rescale
                            continue
                    if not best["diverged"]:
                        run.log_metrics({"best_lr": best["lr"], "final_error": best["final_error"]})
                    if rank == r0:  # the rescalings at the first rank only (what the summary reports)
                        runs += [one(c, best["lr"]) | {"role": "rescaled"} for c in cfg.linear.scales if c != 1.0]
    return runs


@task(name="altlora-lm", tags=[GPU_TAG], cache_policy=NO_CACHE)
def lm_variant(cfg: AltLoRAConfig, name: OptimizerName, lr: float, ctx: track.RunContext,
               optimizer_run: track.Run, distributed: DistributedConfig = DistributedConfig(), s: int = 0) -> dict:
    """One (optimizer, lr) of the LM adaptation at seed index `s` (of `cfg.run_seeds()`): a nested
    MLflow run, a resumable checkpoint. `distributed` (params/runtime.yaml runtime.distributed) spreads the
    training over devices."""
    from paperline.methods.altlora.lm import adapt_lm

    variant = f"{name}_lm_lr{lr:g}" + (f"/seed{s}" if s else "")  # seed 0 where one seed's runs always were
    with unit(ctx, variant, {"optimizer": name, "lr": lr, "seed": s}, threads=1, parent=optimizer_run,
              devices=distributed.devices) as u:
        run = u.run
        result = adapt_lm(cfg, name, lr, u.device, checkpoint_path=u.models / "lm" / f"{variant}.pt",
                          progress=sys.stderr.isatty(), distributed=distributed,
                          device_indices=[d.index for d in u.devices], seed=cfg.run_seeds()[s])
        for history in (result["history"], result["eval_history"]):
            for key, values in history.items():
                if key != "step":
                    run.log_history(key, history["step"], values)
        run.log_metrics({k: v for k, v in result.items() if isinstance(v, (int, float)) and k != "lr"})
    return result | {"seed": s}


def lm_repeats(cfg: AltLoRAConfig, sweep: list[dict]) -> list[tuple[OptimizerName, float, int]]:
    """(optimizer, its best lr of the first seed's sweep, seed index) for every other seed: the LM
    runs the claims pair with the sweep's best."""
    best = lm_best_runs(cfg, sweep)
    return [(name, run["lr"], s) for s in range(1, len(cfg.run_seeds())) for name, run in best.items()
            if run is not None]


@task(name="altlora-step-time", tags=[GPU_TAG], cache_policy=NO_CACHE)
def step_time(cfg: AltLoRAConfig, ctx: track.RunContext) -> dict:
    """Step time and state of every optimizer against LoRA-AdamW, round-robin in this one task."""
    with unit(ctx, "step_time", {"dim": cfg.timing_dim, "layers": cfg.timing_layers, "rank": cfg.timing_rank,
                                 "rounds": cfg.timing_rounds, "steps": cfg.timing_steps}, threads=1) as u:
        run = u.run
        times = step_times(list(cfg.optimizers), cfg.timing_dim, cfg.timing_layers, cfg.timing_rank, cfg.settings,
                           cfg.timing_rounds, cfg.timing_steps, u.device)
        run.log_metrics({f"{name}/{k}": v for name, row in times.items() for k, v in row.items()})
    return times


@task(name="altlora-report", cache_policy=NO_CACHE)
def report(cfg: AltLoRAConfig, linear_runs: list[dict], lm_runs: list[dict], times: dict,
           ctx: track.RunContext) -> Report:
    # the base model's held-out losses, measured by each LM run before it trains (all alike)
    lm_base = {k: lm_runs[0][k] for k in ("base_target_val_loss", "base_source_val_loss")} if lm_runs else None
    rows = summarize(cfg, linear_runs, lm_runs, times)
    with ctx.child(NO_ADAPTATION, params={"what": "W₀ itself (ΔW = 0) and the LM base, scored as every variant"}):
        pass  # the trivial baseline's row lands on it when the flow publishes
    return Report(method_metrics(cfg, rows, linear_runs, lm_runs, ctx.profile, lm_base),
                  plots.write_all(cfg, rows, linear_runs, plots_dir(METHOD)))
