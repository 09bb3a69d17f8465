"""QFFT: a short-CoT base model, then four fine-tunes from it with one budget — SFT on
[question; long response] (loss on the response), QFFT on the response alone, and both under
noise level IV (shuffled pairs) — evaluated on the same questions: accuracy, length, long-CoT
rate on easy/hard questions, RAK and AES against the base."""
from __future__ import annotations

from prefect import flow

from flows.launch import resolve
from tasks import track
from tasks.qfft import METHOD, VARIANTS, finetune_variant, prepare_data, publish, train_base
from tasks.resume import open_run_dir
from tasks.runners import ensure_gpu_limit, submit_gpu


@flow(name="qfft", log_prints=True)
def qfft_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    profile, cfg = resolve(METHOD, profile, overrides or [])
    ensure_gpu_limit()
    run_dir = open_run_dir(METHOD, {"profile": profile, **cfg.model_dump()})
    data = prepare_data(cfg)  # a malformed JSONL line fails here, before any training
    if run_dir.resumed and track.fail_if_running(run_dir.previous_parent_run):
        print(f"previous run {run_dir.previous_parent_run} died; resuming from its checkpoints")
    with track.parent_run(METHOD, profile, {"profile": profile, **cfg.model_dump()}, data.version) as parent:
        run_dir.record_parent(parent.run_id)
        base = submit_gpu(train_base, cfg, data, parent, profile)
        tuned = {v: submit_gpu(finetune_variant, cfg, v, data, parent, profile, wait_for=[base]) for v in VARIANTS}
        summary = publish(base.result(), {v: f.result() for v, f in tuned.items()}, parent)
    run_dir.mark_complete()
    return summary
