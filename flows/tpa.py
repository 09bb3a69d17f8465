"""TPA / T6 against MHA, MQA, GQA and MLA: the corpus, every attention variant trained with the same
budget at ≈ equal attention parameters (one MLflow child each), decode time per token at several
context lengths, then the comparison table (with Table 1's cache sizes at the paper's configs)."""
from __future__ import annotations

from prefect import flow

from flows.launch import resolve
from tasks import track
from tasks.resume import open_run_dir
from tasks.runners import ensure_gpu_limit, submit_gpu
from tasks.tpa import METHOD, decode_time, prepare_data, publish, train_variant


@flow(name="tpa", log_prints=True)
def tpa_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    profile, cfg = resolve(METHOD, profile, overrides or [])
    data = prepare_data(cfg)  # a missing, corrupt or mismatched corpus fails here, before any work
    ensure_gpu_limit()
    run_dir = open_run_dir(METHOD, {"profile": profile, **cfg.model_dump()})
    if run_dir.resumed and track.fail_if_running(run_dir.previous_parent_run):
        print(f"previous run {run_dir.previous_parent_run} died; resuming from its checkpoints")
    with track.parent_run(METHOD, profile, {"profile": profile, **cfg.model_dump()}, data.version) as parent:
        run_dir.record_parent(parent.run_id)
        futures = {v: submit_gpu(train_variant, cfg, v, data, parent, profile) for v in cfg.variants}
        timing = submit_gpu(decode_time, cfg, data, parent, profile)
        runs = {v: f.result() for v, f in futures.items()}
        summary = publish(cfg, runs, timing.result(), parent)
    run_dir.mark_complete()
    return summary
