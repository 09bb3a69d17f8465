"""NGN-M: sweep the step size c over decades × seeds for NGN, NGN-M, NGN-MD and SGD, SGDM,
Adam on each problem, then count per optimizer the decades of c that stay within 10% of its best."""
from __future__ import annotations

from prefect import flow

from flows.launch import resolve
from tasks import track
from tasks.ngn_m import METHOD, check_data, data_version, publish, sweep
from tasks.resume import open_run_dir
from tasks.runners import ensure_gpu_limit, submit_gpu


@flow(name="ngn_m", log_prints=True)
def ngn_m_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    profile, cfg = resolve(METHOD, profile, overrides or [])
    check_data(cfg)  # real-data paths of the paper profile, before any work
    ensure_gpu_limit()
    run_dir = open_run_dir(METHOD, {"profile": profile, **cfg.model_dump()})
    if run_dir.resumed and track.fail_if_running(run_dir.previous_parent_run):
        print(f"previous run {run_dir.previous_parent_run} died; resuming from its finished runs")
    data = data_version(cfg)
    with track.parent_run(METHOD, profile, {"profile": profile, **cfg.model_dump()}, data) as parent:
        run_dir.record_parent(parent.run_id)
        futures = [submit_gpu(sweep, cfg, problem, optimizer, parent, profile, data)
                   for problem in cfg.problems for optimizer in cfg.optimizers_for(problem)]
        variants = [future.result() for future in futures]
        summary = publish(cfg, variants, parent)
    run_dir.mark_complete()
    return summary
