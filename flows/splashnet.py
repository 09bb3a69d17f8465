"""SplashNet against the emg2qwerty baseline: check the semg stages' features are current for these
parameters, count the beam search's character LM, train every variant in parallel as GPU tasks
(generic model, zero-shot CER on held-out users, per-user fine-tuning), count parameters and
FLOPs at the paper configuration, then publish the comparison."""
from __future__ import annotations

from prefect import flow

from flows.launch import resolve
from tasks import track
from tasks.resume import open_run_dir
from tasks.runners import ensure_gpu_limit, submit_gpu
from tasks.semg_prep import require_prepared
from tasks.splashnet import METHOD, data_version, model_table, publish, train_char_lm, train_variant


@flow(name="splashnet", log_prints=True)
def splashnet_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    profile, cfg = resolve(METHOD, profile, overrides or [])
    features = require_prepared(cfg)  # missing or stale features fail here, before any work
    ensure_gpu_limit()
    data = data_version(features)
    run_config = {"profile": profile, **cfg.model_dump()}
    run_dir = open_run_dir(METHOD, run_config)
    if run_dir.resumed and track.fail_if_running(run_dir.previous_parent_run):
        print(f"previous run {run_dir.previous_parent_run} died; resuming from its checkpoints")
    with track.parent_run(METHOD, profile, run_config, data) as parent:
        run_dir.record_parent(parent.run_id)
        lm_path = train_char_lm(cfg, parent)
        futures = [submit_gpu(train_variant, cfg, v, features, parent, profile, data, lm_path) for v in cfg.variants]
        table = model_table.submit(parent)
        results = [f.result() for f in futures]
        summary = publish(cfg, results, table.result(), features, parent)
    run_dir.mark_complete()
    return summary
