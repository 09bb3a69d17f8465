"""Tasks of the STAR flow: the environments checked before any work, one training task per
(task, variant, feedback budget) row running its seeds (an MLflow child run per row, a nested run
per seed with its learning curve), the offline variant after its task's oracle row (a child run
per extraction, a nested run per seed), then the report."""
from __future__ import annotations

import sys
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.methods.star import plots
from paperline.methods.star.config import StarConfig, row_name, runs_of
from paperline.methods.star.envs import check_env
from paperline.methods.star.offline import read_offline, run_offline
from paperline.methods.star.summary import method_metrics
from paperline.methods.star.train import load_agent, train_run
from tasks import track
from tasks.paths import plots_dir
from tasks.publish import Report
from tasks.runners import GPU_TAG
from tasks.unit import unit

METHOD = "star"


def data(cfg: StarConfig) -> str:
    """No data files by default: the environments are made once here, so an unknown id, a missing
    package or a space the agent cannot take fails before the run starts; so do configured offline
    files (`offline.dataset`, `offline.labels`) that miss a field or do not fit their task."""
    infos = {t.name: check_env(t.env_id, t.kind, t.env_kwargs) for t in cfg.tasks}
    off = cfg.offline
    if off is not None and off.dataset is not None:
        read_offline(Path(off.dataset), Path(off.labels), off.segment, infos[off.task])
    return track.data_version()


def planned_rows(cfg: StarConfig) -> dict[str, tuple[str, str, int | None]]:
    """Row name -> (task, variant, budget) of every online row the flow trains."""
    return {row_name(t.name, v, b): (t.name, v, b) for t, v, b in runs_of(cfg)}


def oracle_row(cfg: StarConfig) -> str:
    """The row whose SAC is the offline variant's expert (its task's oracle)."""
    return row_name(cfg.offline.task, "oracle", None)


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
@task(name="star-train", tags=[GPU_TAG], cache_policy=NO_CACHE)
def train_row(cfg: StarConfig, task_name: str, variant: str, budget: int | None, ctx: track.RunContext) -> dict:
    """Every seed of one row, on the slot's device (the paper profile's 1024×2 networks want a GPU)."""
    t = next(t for t in cfg.tasks if t.name == task_name)
    name = row_name(task_name, variant, budget)
    seeds = []
    with unit(ctx, name, {"task": t.model_dump(), "variant": variant, "budget": budget},
              threads=cfg.threads) as u:
        row_run, device = u.run, u.device
        for seed in cfg.run_seeds():
            with ctx.child(f"{name}/seed{seed}", params={"seed": seed}, parent=row_run) as run:
                result = train_run(cfg, t, variant, budget, seed, u.models / name / f"seed{seed}.pt",
                                   progress=sys.stderr.isatty(), device=device)
                run.log_history("eval_return", result["curve"]["step"], result["curve"]["return"])
                for key in ("q_mean", "true_value"):  # the paper's overestimation, over training
                    run.log_history(f"eval_{key}", result["curve"]["step"], result["curve"][key])
                run.log_metrics({k: result[k] for k in ("return", "random_return", "success", "overestimation",
                                                        "overestimation_rel", "pref_accuracy", "labels", "seconds")
                                 if result[k] is not None})
            seeds.append(result)
    return {"task": task_name, "variant": variant, "budget": budget, "seeds": seeds}


@task(name="star-offline", tags=[GPU_TAG], cache_policy=NO_CACHE)
def train_offline(cfg: StarConfig, ctx: track.RunContext) -> list[dict]:
    """The offline variant, every seed (after the oracle row of its task: its SAC is the expert
    behaviour policy). A child run per extraction (`offline-<variant>`), a nested run per seed."""
    from paperline.methods.star.summary import OWN_REWARD_MODEL, normalised

    off = cfg.offline
    t = next(t for t in cfg.tasks if t.name == off.task)
    oracle = oracle_row(cfg)
    params = {f"offline-{v}": {"task": off.task, "variant": v, "offline": off.model_dump()} for v in off.variants}
    seeds = []
    with unit(ctx, threads=cfg.threads) as u, ctx.children(params) as runs:
        for seed in cfg.run_seeds():
            agent, info = load_agent(cfg, t, "oracle", None, seed, u.models / oracle / f"seed{seed}.pt")
            result = run_offline(cfg, t, info, lambda obs: agent.act(obs, deterministic=True), seed,
                                 u.models / "offline" / f"seed{seed}", progress=sys.stderr.isatty(), device=u.device)
            for v, res in result["variants"].items():
                accuracy = result.get(OWN_REWARD_MODEL.get(v, "pref_accuracy"))  # its reward model's
                with ctx.child(f"offline-{v}/seed{seed}", params={"seed": seed}, parent=runs[f"offline-{v}"]) as run:
                    run.log_metrics({"return": res["return"], "expert_return": result["expert_return"],
                                     "random_return": result["random_return"], "labels": result["labels"],
                                     "normalized_return": normalised(res["return"], result["expert_return"],
                                                                     result["random_return"])}
                                    | ({"pref_accuracy": accuracy} if accuracy is not None else {}))
            seeds.append(result)
    return seeds


@task(name="star-report", cache_policy=NO_CACHE)
def report(cfg: StarConfig, results: dict[str, dict], ctx: track.RunContext, offline: list[dict] | None = None
           ) -> Report:
    metrics = method_metrics(cfg, results, ctx.profile, offline)
    return Report(metrics, plots.write_all(cfg, metrics, plots_dir(METHOD)))
