"""Tasks of the STAR flow: the environments checked before any work, one training task per
(task, variant, feedback budget) row running its seeds (an MLflow child run per row, a nested run
per seed with its learning curve), then the report."""
from __future__ import annotations

import sys

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.methods.star import plots
from paperline.methods.star.config import StarConfig, row_name
from paperline.methods.star.envs import check_env
from paperline.methods.star.summary import method_metrics
from paperline.methods.star.train import train_run
from tasks import track
from tasks.paths import models_dir, plots_dir
from tasks.publish import Report
from tasks.runners import GPU_TAG, gpu_slot

METHOD = "star"


def data(cfg: StarConfig) -> str:
    """No data files: the environments are made once here, so an unknown id, a missing package or
    a space the agent cannot take fails before the run starts."""
    for t in cfg.tasks:
        check_env(t.env_id, t.kind, t.env_kwargs)
    return track.data_version()


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
@task(name="star-train", tags=[GPU_TAG], cache_policy=NO_CACHE)
def train_row(cfg: StarConfig, task_name: str, variant: str, budget: int | None, ctx: track.RunContext) -> dict:
    """Every seed of one row, on the slot's device (the paper profile's 1024×2 networks want a GPU)."""
    import torch

    torch.set_num_threads(cfg.threads)
    t = next(t for t in cfg.tasks if t.name == task_name)
    name = row_name(task_name, variant, budget)
    seeds = []
    with gpu_slot() as device, ctx.child(name, params={"task": t.model_dump(), "variant": variant, "budget": budget,
                                                       "device": str(device)}) as row_run:
        for s in range(cfg.seeds):
            seed = cfg.seed + s
            with ctx.child(f"{name}/seed{seed}", params={"seed": seed}, parent=row_run) as run:
                result = train_run(cfg, t, variant, budget, seed, models_dir(METHOD) / name / f"seed{seed}.pt",
                                   progress=sys.stderr.isatty(), device=device)
                run.log_history("eval_return", result["curve"]["step"], result["curve"]["return"])
                run.log_metrics({k: result[k] for k in ("return", "random_return", "overestimation",
                                                        "overestimation_rel", "pref_accuracy", "labels", "seconds")
                                 if result[k] is not None})
            seeds.append(result)
    return {"task": task_name, "variant": variant, "budget": budget, "seeds": seeds}


@task(name="star-report", cache_policy=NO_CACHE)
def report(cfg: StarConfig, results: dict[str, dict], ctx: track.RunContext) -> Report:
    metrics = method_metrics(cfg, results, ctx.profile)
    return Report(metrics, plots.write_all(cfg, metrics, plots_dir(METHOD)))
