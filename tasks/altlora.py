"""Tasks of the AltLoRA flow: the linear adaptation of one optimizer (its lr sweep, then the
rescaled initialisations), the LM adaptation of one (optimizer, lr), the step-time measurement,
then the report."""
from __future__ import annotations

import sys

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.io import read_json, write_json
from paperline.methods.altlora import plots
from paperline.methods.altlora.claims import NO_ADAPTATION
from paperline.methods.altlora.config import AltLoRAConfig, OptimizerName
from paperline.methods.altlora.linear import best_run, make_problem, train_linear
from paperline.methods.altlora.summary import method_metrics, summarize
from paperline.methods.altlora.timing import step_times
from paperline.train.distributed import DistributedConfig
from tasks import track
from tasks.paths import models_dir, plots_dir
from tasks.publish import Report
from tasks.runners import GPU_TAG, gpu_devices, gpu_slot

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


def _cached(path, compute):
    """A finished run's record is kept in the run directory: a killed flow resumes past it."""
    if path.exists():
        return read_json(path)
    record = compute()
    write_json(path, record)
    return record


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
def linear_seed(cfg: AltLoRAConfig, s: int) -> int:
    """The seed of the linear problem's run s (its W₀, Δ, data, initialisation); s = 0 is cfg.seed."""
    return cfg.seed + 1000 * s


@task(name="altlora-linear", tags=[GPU_TAG], cache_policy=NO_CACHE)
def linear_variant(cfg: AltLoRAConfig, name: OptimizerName, ctx: track.RunContext,
                   optimizer_run: track.Run) -> list[dict]:
    """Seed 0: per rank, the lr grid at c = 1; at the first rank, then the best lr under every other
    c. Every other seed (its own problem): that best lr at the first rank under every c. One nested
    MLflow run per (rank, seed) with each run's curves."""
    import torch

    torch.set_num_threads(1)  # 64×64 matmuls: threads cost more than they give
    folder = models_dir(METHOD) / "linear" / name
    r0 = cfg.linear.ranks[0]
    runs, best_lr = [], None
    with gpu_slot():  # CPU work (tiny matrices), but one training at a time like every model task
        for s in range(cfg.linear.seeds):
            seed = linear_seed(cfg, s)
            problem = make_problem(cfg.linear, seed)
            here = folder if s == 0 else folder / f"seed{s}"  # seed 0 where one seed's records always were
            for rank in cfg.linear.ranks if s == 0 else [r0]:
                with ctx.child(f"{name}_linear_r{rank}/seed{s}", params={"optimizer": name, "rank": rank, "seed": s},
                               parent=optimizer_run) as run:
                    def one(c, lr):
                        record = _cached(here / f"r{rank}_c{c:g}_lr{lr:g}.json", lambda: train_linear(
                            name, problem, rank, c, lr, cfg.linear, cfg.settings, seed))
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
               optimizer_run: track.Run, distributed: DistributedConfig = DistributedConfig()) -> dict:
    """One (optimizer, lr) of the LM adaptation: a nested MLflow run, a resumable checkpoint.
    `distributed` (params.yaml runtime.distributed) spreads the training over devices."""
    import torch

    from paperline.methods.altlora.lm import adapt_lm

    torch.set_num_threads(1)
    variant = f"{name}_lm_lr{lr:g}"
    with gpu_devices(distributed.devices) as devices, ctx.child(
            variant, params={"optimizer": name, "lr": lr, "device": ",".join(map(str, devices))},
            parent=optimizer_run) as run:
        result = adapt_lm(cfg, name, lr, devices[0], checkpoint_path=models_dir(METHOD) / "lm" / f"{variant}.pt",
                          progress=sys.stderr.isatty(), distributed=distributed,
                          device_indices=[d.index for d in devices])
        for history in (result["history"], result["eval_history"]):
            for key, values in history.items():
                if key != "step":
                    run.log_history(key, history["step"], values)
        run.log_metrics({k: v for k, v in result.items() if isinstance(v, (int, float)) and k != "lr"})
    return result


@task(name="altlora-step-time", tags=[GPU_TAG], cache_policy=NO_CACHE)
def step_time(cfg: AltLoRAConfig, ctx: track.RunContext) -> dict:
    """Step time and state of every optimizer against LoRA-AdamW, round-robin in this one task."""
    import torch

    torch.set_num_threads(1)
    with gpu_slot() as device, ctx.child("step_time", params={
            "device": str(device), "dim": cfg.timing_dim, "layers": cfg.timing_layers, "rank": cfg.timing_rank,
            "rounds": cfg.timing_rounds, "steps": cfg.timing_steps}) as run:
        times = step_times(list(cfg.optimizers), cfg.timing_dim, cfg.timing_layers, cfg.timing_rank, cfg.settings,
                           cfg.timing_rounds, cfg.timing_steps, device)
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
