"""Tasks of the PubSub-VFL flow: the whole comparison (planner, variants × seeds, DP sweep, grid,
fault run) as one task, since its timings mean something only when nothing runs beside it; then
the report."""
from __future__ import annotations

import pickle

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.methods.pubsub_vfl import plots
from paperline.methods.pubsub_vfl.config import PubSubVFLConfig
from paperline.methods.pubsub_vfl.data import load
from paperline.methods.pubsub_vfl.experiment import Experiment, run_experiment
from paperline.methods.pubsub_vfl.summary import METHOD, method_metrics, metric_name
from paperline.io import atomic_path
from tasks import track
from tasks.paths import models_dir, plots_dir
from tasks.publish import Report
from tasks.runners import GPU_TAG, gpu_slot


def data_version(cfg: PubSubVFLConfig) -> str:
    """The table's digest for file data (a missing file fails here, before any work); else 'generated'."""
    return track.data_version([cfg.data.path] if cfg.data.name == "file" else [])


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
@task(name="pubsub_vfl-train", tags=[GPU_TAG], cache_policy=NO_CACHE)
def train_all(cfg: PubSubVFLConfig, ctx: track.RunContext) -> tuple[Experiment, str]:
    """Every variant over the same channels, one after another; a child run per variant with its
    per-seed figures, test-metric curve and final models. CPU only: the slot keeps it alone."""
    data = load(cfg.data)
    with gpu_slot():
        exp = run_experiment(cfg, data, log=print)
    name = metric_name(data.task)
    for variant, runs in exp.runs.items():
        params = {"workers_active": runs[0].workers_active, "workers_passive": runs[0].workers_passive,
                  "batch_size": runs[0].batch_size}
        with ctx.child(variant, params=params) as run:
            for r in runs:
                run.log_metrics({f"seed{r.seed}/{name}": r.metric, f"seed{r.seed}/wall_s": r.wall_s,
                                 f"seed{r.seed}/idle_active": r.idle_fraction["active"],
                                 f"seed{r.seed}/idle_passive": r.idle_fraction["passive"],
                                 f"seed{r.seed}/dropped": r.dropped})
                run.log_history(f"{name}/seed{r.seed}", range(len(r.curve)), [m for _, m in r.curve])
                path = models_dir(METHOD) / variant / f"seed{r.seed}.pkl"
                with atomic_path(path) as tmp:
                    tmp.write_bytes(pickle.dumps(r.params))
                run.log_artifact(path, "models")
    return exp, data.task


@task(name="pubsub_vfl-report", cache_policy=NO_CACHE)
def report(cfg: PubSubVFLConfig, trained: tuple[Experiment, str], ctx: track.RunContext) -> Report:
    exp, data_task = trained
    return Report(method_metrics(cfg, exp, data_task, ctx.profile), plots.write_all(exp, data_task, plots_dir(METHOD)))
