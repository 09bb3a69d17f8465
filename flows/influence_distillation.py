"""Influence Distillation against random, RDS+-like and exact first-order selection: the
tulu-select stage made every selection in one process (so the cost ratio is measured in the same
run); the flow runs the convex QP check beside one fine-tuning task (an MLflow child run) per
selection method, then the comparison table and plots."""
from __future__ import annotations

from prefect import flow

from flows.launch import resolve
from tasks import track
from tasks.influence_distillation import METHOD, data_version, finetune_variant, load_selection, publish, qp_check
from tasks.resume import open_run_dir
from tasks.runners import ensure_gpu_limit, submit_gpu
from tasks.tulu_prep import with_resolved_paths


@flow(name="influence_distillation", log_prints=True)
def influence_distillation_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    profile, cfg = resolve(METHOD, profile, overrides or [])
    cfg = with_resolved_paths(cfg)
    data = data_version(cfg)  # a missing pool fails here, before any work
    selection = load_selection(cfg)  # so does a missing or mismatched selection
    ensure_gpu_limit()
    run_dir = open_run_dir(METHOD, {"profile": profile, **cfg.model_dump()})
    if run_dir.resumed and track.fail_if_running(run_dir.previous_parent_run):
        print(f"previous run {run_dir.previous_parent_run} died; resuming from its checkpoints")
    with track.parent_run(METHOD, profile, {"profile": profile, **cfg.model_dump()}, data) as parent:
        run_dir.record_parent(parent.run_id)
        qp_future = qp_check.submit(cfg, parent)
        futures = {m: submit_gpu(finetune_variant, cfg, m, selection, parent, profile, data) for m in cfg.methods}
        rows = {m: f.result() for m, f in futures.items()}
        summary = publish(cfg, selection, rows, qp_future.result(), parent)
    run_dir.mark_complete()
    return summary
