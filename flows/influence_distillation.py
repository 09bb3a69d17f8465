"""Influence Distillation against random, RDS+-like and exact first-order selection: the
tulu-select stage made every selection in one process (so the cost ratio is measured in the same
run); the flow runs the convex QP check beside one fine-tuning task (an MLflow child run) per
selection method, then the comparison table and plots."""
from __future__ import annotations

from prefect import flow

from flows.skeleton import method_run
from tasks.influence_distillation import METHOD, data, finetune_variant, qp_check, report
from tasks.runners import submit_gpu


@flow(name="influence_distillation", log_prints=True)
def influence_distillation_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    # data: a missing pool, or a missing or mismatched selection, fails before any work
    with method_run(METHOD, profile, overrides, data=data) as run:
        selection = run.data.selection
        qp_future = qp_check.submit(run.cfg, run.context)
        futures = {m: submit_gpu(finetune_variant, run.cfg, m, selection, run.context) for m in run.cfg.methods}
        rows = {m: f.result() for m, f in futures.items()}
        return run.publish(report.submit(selection, rows, qp_future.result(), run.context))
