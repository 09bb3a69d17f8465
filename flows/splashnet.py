"""SplashNet against the emg2qwerty baseline: check the semg stages' features are current for these
parameters, count the beam search's character LM, train every variant at every seed as GPU tasks
(generic model, zero-shot CER on held-out users, per-user fine-tuning; an MLflow child run per
variant with a run per seed nested under it), count parameters and FLOPs at the paper
configuration, then publish the comparison of the means over seeds."""
from __future__ import annotations

from prefect import flow

from flows.skeleton import method_run
from tasks.runners import submit_gpu
from tasks.splashnet import METHOD, features, model_table, report, train_char_lm, train_variant, variant_runs


@flow(name="splashnet", log_prints=True)
def splashnet_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    # features: missing or stale ones (other data parameters than this run's) fail before any work
    with method_run(METHOD, profile, overrides, data=features) as run:
        char_lm = train_char_lm(run.cfg)
        lm_path = char_lm["path"] if char_lm else None
        with variant_runs(run.cfg, run.context) as runs:
            # seed by seed: where the trainings queue on one device, each seed's whole comparison lands
            # before the next seed's starts
            futures = [submit_gpu(train_variant, run.cfg, v, seed, run.data, run.context, runs[v], lm_path,
                                  run.distributed, gpus=run.gpus)
                       for seed in run.cfg.run_seeds() for v in run.cfg.variants]
            table = model_table.submit()
            results = [f.result() for f in futures]
            return run.publish(report.submit(run.cfg, results, table.result(), char_lm, run.data, run.context))
