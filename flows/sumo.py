"""SUMO against AdamW, GaLore-AdamW and Muon: the Newton–Schulz-vs-SVD theory check beside the
training sweep (every optimizer × lr, seeds inside each task: the digits MLP, or LLaMA on C4 in the
paper profile), the step-time measurement, then the comparison table and plots."""
from __future__ import annotations

from prefect import flow

from flows.launch import resolve
from tasks import track
from tasks.resume import open_run_dir
from tasks.runners import ensure_gpu_limit, submit_gpu
from tasks.sumo import (METHOD, data_version, publish, step_time, theory, train_variant,
                        with_resolved_paths)


@flow(name="sumo", log_prints=True)
def sumo_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    profile, cfg = resolve(METHOD, profile, overrides or [])
    cfg = with_resolved_paths(cfg)
    data = data_version(cfg)  # a missing C4 folder or tokenizer fails here, before any work
    ensure_gpu_limit()
    run_dir = open_run_dir(METHOD, {"profile": profile, **cfg.model_dump()})
    if run_dir.resumed and track.fail_if_running(run_dir.previous_parent_run):
        print(f"previous run {run_dir.previous_parent_run} died; resuming from its checkpoints")
    with track.parent_run(METHOD, profile, {"profile": profile, **cfg.model_dump()}, data) as parent:
        run_dir.record_parent(parent.run_id)
        theory_future = theory.submit(cfg, parent)
        futures = [submit_gpu(train_variant, cfg, name, lr, parent, profile, data)
                   for name in cfg.optimizers for lr in cfg.lr_grid[name]]
        timing_future = submit_gpu(step_time, cfg, parent, profile, data)
        runs = [result for future in futures for result in future.result()]
        summary = publish(cfg, runs, theory_future.result(), timing_future.result(), parent)
    run_dir.mark_complete()
    return summary
