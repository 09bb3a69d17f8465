"""Tasks of the PubSub-VFL flow: the whole comparison (planner, variants × seeds, the active party
alone, DP sweep, grid, fault run) as one task, since its timings mean something only when nothing
runs beside it; an MLflow child run per variant with a run per seed nested under it; then the
report."""
from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.methods.pubsub_vfl import plots
from paperline.methods.pubsub_vfl.claims import ALONE, DP_VARIANT
from paperline.methods.pubsub_vfl.config import PubSubVFLConfig
from paperline.methods.pubsub_vfl.data import load
from paperline.methods.pubsub_vfl.experiment import DP_CLAIM_MU, Experiment, model_file, run_experiment
from paperline.methods.pubsub_vfl.summary import METHOD, method_metrics, metric_name, seed_row
from tasks import track
from tasks.paths import models_dir, plots_dir
from tasks.publish import Report
from tasks.runners import GPU_TAG
from tasks.unit import unit


def data_version(cfg: PubSubVFLConfig) -> str:
    """The table's digest for file data, read and checked here, before any output is touched (a file
    that is not a table, a missing column, a value that is not a number: one line naming it); else
    'generated'."""
    if cfg.data.name == "file":
        load(cfg.data)
    return track.data_version([cfg.data.path] if cfg.data.name == "file" else [])


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
@task(name="pubsub_vfl-train", tags=[GPU_TAG], cache_policy=NO_CACHE)
def train_all(cfg: PubSubVFLConfig, ctx: track.RunContext) -> tuple[Experiment, str]:
    """Every variant over the same channels, one after another; a child run per variant (its row,
    the mean over seeds, lands on it when the flow publishes) with a run per seed nested under it:
    the seed's figures, test-metric curve and final models. CPU only: the slot keeps it alone."""
    data = load(cfg.data)
    with unit(ctx):  # the runs are logged after, outside the slot
        # the run directory keeps the plan and each finished run: a killed flow resumes past them
        exp = run_experiment(cfg, data, log=print, records=models_dir(METHOD) / "units",
                             data_version=ctx.data_version, models=models_dir(METHOD))
    name = metric_name(data.task)
    dp_runs = [r for r in exp.dp if r.dp_mu == DP_CLAIM_MU]
    for variant, runs in list(exp.runs.items()) + ([(DP_VARIANT, dp_runs)] if dp_runs else []):
        params = {"workers_active": runs[0].workers_active, "workers_passive": runs[0].workers_passive,
                  "batch_size": runs[0].batch_size, "dp_mu": runs[0].dp_mu}
        with ctx.child(variant, params=params) as variant_run:
            for r in runs:
                with ctx.child(f"{variant}/seed{r.seed}", params=params | {"seed": r.seed}, parent=variant_run) as run:
                    run.log_metrics({k: v for k, v in seed_row(r, name).items() if isinstance(v, (int, float))})
                    # the test metric after each epoch (its own key: the final model's is `name`)
                    run.log_history(f"{name}_per_epoch", range(len(r.curve)), [p["metric"] for p in r.curve])
                    # kept there by the experiment, once (its run's record refers to it)
                    run.log_artifact(models_dir(METHOD) / model_file(variant, r.seed), "models")
    with ctx.child(ALONE, params={"batch_size": exp.plan["B"]}) as variant_run:  # in process: no model kept
        for seed, metric in exp.alone.items():
            with ctx.child(f"{ALONE}/seed{seed}", params={"seed": seed}, parent=variant_run) as run:
                run.log_metrics({name: metric})
    return exp, data.task


@task(name="pubsub_vfl-report", cache_policy=NO_CACHE)
def report(cfg: PubSubVFLConfig, trained: tuple[Experiment, str], ctx: track.RunContext) -> Report:
    exp, data_task = trained
    return Report(method_metrics(cfg, exp, data_task, ctx.profile), plots.write_all(exp, data_task, plots_dir(METHOD)))
