"""Deep neural collapse under cross-entropy: train deep UFMs over (K, L, d, seed), compare the
trained objectives with the closed-form DNC value f_DNC* and the rank-2 competitor f_cos*."""
from __future__ import annotations

from prefect import flow

from flows.launch import resolve
from tasks import track
from tasks.dnc import METHOD, publish, train_group
from tasks.resume import open_run_dir
from tasks.runners import ensure_gpu_limit, submit_gpu


@flow(name="dnc", log_prints=True)
def dnc_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    profile, cfg = resolve(METHOD, profile, overrides or [])
    ensure_gpu_limit()
    run_dir = open_run_dir(METHOD, {"profile": profile, **cfg.model_dump()})
    if run_dir.resumed and track.fail_if_running(run_dir.previous_parent_run):
        print(f"previous run {run_dir.previous_parent_run} died; resuming from its checkpoints")
    data = track.data_version()  # no input files: the features are free parameters
    with track.parent_run(METHOD, profile, {"profile": profile, **cfg.model_dump()}, data) as parent:
        run_dir.record_parent(parent.run_id)
        futures = [submit_gpu(train_group, cfg, K, L, parent, profile, data)
                   for K in cfg.classes for L in cfg.depths]
        results = [result for future in futures for result in future.result()]
        summary = publish(cfg, results, parent)
    run_dir.mark_complete()
    return summary
