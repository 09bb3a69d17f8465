"""Influence Distillation against random, RDS+-like and exact first-order selection: the
tulu-select stage made every selection in one process (so the cost ratio is measured in the same
run); the flow runs the convex QP check beside one fine-tuning task per selection method and
fine-tuning seed (an MLflow child run per method, a run per seed under it), then the comparison of
the means over seeds, its claims paired by seed, and plots."""
from __future__ import annotations

from prefect import flow

from flows.skeleton import method_run
from tasks.influence_distillation import METHOD, data, finetune_variant, qp_check, report, variant_runs
from tasks.runners import submit_gpu


@flow(name="influence_distillation", log_prints=True)
def influence_distillation_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    # data: a missing pool, or a missing or mismatched selection, fails before any work
    with method_run(METHOD, profile, overrides, data=data) as run:
        selection = run.data.selection
        qp_future = qp_check.submit(run.cfg, run.context)
        with variant_runs(run.cfg, run.context) as runs:
            # seed by seed: on one device each seed's whole comparison lands before the next seed's starts
            futures = {(m, seed): submit_gpu(finetune_variant, run.cfg, m, seed, selection, run.context, runs[m])
                       for seed in run.cfg.run_seeds() for m in run.cfg.methods}
            per_seed: dict[str, dict[str, dict]] = {m: {} for m in run.cfg.methods}
            for (m, seed), f in futures.items():
                per_seed[m][str(seed)] = f.result()
            return run.publish(report.submit(selection, per_seed, qp_future.result(), run.context))
