"""Memory Decoder: two corpora of one tokenizer, two base LMs pretrained on the general corpus, the
large base's kNN-LM datastore over the domain training set, the MemDec trained to imitate its kNN
distributions (α·KL + (1 − α)·CE), then domain and general perplexity of base, base + kNN-LM and
base + MemDec over a λ sweep for both bases with the same MemDec, datastore size and inference time."""
from __future__ import annotations

from prefect import flow

from flows.launch import resolve
from tasks import track
from tasks.memory_decoder import (BASES, METHOD, build_datastore, evaluate, prepare_data, publish, train_base,
                                  train_memdec_task)
from tasks.resume import open_run_dir
from tasks.runners import ensure_gpu_limit, submit_gpu


@flow(name="memory_decoder", log_prints=True)
def memory_decoder_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    profile, cfg = resolve(METHOD, profile, overrides or [])
    ensure_gpu_limit()
    run_dir = open_run_dir(METHOD, {"profile": profile, **cfg.model_dump()})
    data = prepare_data(cfg)  # a missing, corrupt or mismatched corpus fails here, before any training
    if run_dir.resumed and track.fail_if_running(run_dir.previous_parent_run):
        print(f"previous run {run_dir.previous_parent_run} died; resuming from its checkpoints")
    with track.parent_run(METHOD, profile, {"profile": profile, **cfg.model_dump()}, data.version) as parent:
        run_dir.record_parent(parent.run_id)
        base_futures = {size: submit_gpu(train_base, cfg, size, data, parent, profile) for size in BASES}
        # the datastore needs the large base, the MemDec the datastore's targets (and the small base)
        store = submit_gpu(build_datastore, cfg, data, parent, profile, wait_for=[base_futures["large"]])
        memdec = submit_gpu(train_memdec_task, cfg, data, parent, profile,
                            wait_for=[store, base_futures["small"]])
        ev = submit_gpu(evaluate, cfg, data, parent, profile, wait_for=[memdec])
        bases = {size: f.result() for size, f in base_futures.items()}
        summary = publish(cfg, bases, store.result(), memdec.result(), ev.result(), parent)
    run_dir.mark_complete()
    return summary
