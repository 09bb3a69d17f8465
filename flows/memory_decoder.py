"""Memory Decoder: two corpora of one tokenizer, two base LMs pretrained on the general corpus, the
large base's kNN-LM datastore over the domain training set, a MemDec per seed trained to imitate its
kNN distributions (α·KL + (1 − α)·CE), then domain and general perplexity of base, base + kNN-LM
and base + each MemDec over a λ sweep for both bases with the same MemDec, datastore size and
inference time, and the claims."""
from __future__ import annotations

from prefect import flow

from flows.skeleton import method_run
from tasks.memory_decoder import (
    BASES,
    METHOD,
    build_datastore,
    data,
    domain_corpus,
    evaluate,
    memdec_run,
    report,
    train_base,
    train_memdec_task,
)
from tasks.runners import submit_gpu


@flow(name="memory_decoder", log_prints=True)
def memory_decoder_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    # data: a missing, corrupt or mismatched corpus fails before the run starts
    with method_run(METHOD, profile, overrides, data=data) as run:
        cfg, ctx = run.cfg, run.context
        domain = domain_corpus.submit(cfg, run.data)
        base_futures = {size: submit_gpu(train_base, cfg, size, run.data, ctx, run.distributed, gpus=run.gpus)
                        for size in BASES}
        # the datastore needs the large base and the domain, the MemDec the datastore's targets (and
        # the small base), the evaluation the MemDec
        store = submit_gpu(build_datastore, cfg, run.data, ctx, wait_for=[base_futures["large"], domain])
        with memdec_run(cfg, ctx) as memdec_parent:  # a MemDec per seed, each seed's run nested under it
            memdecs = {seed: submit_gpu(train_memdec_task, cfg, run.data, seed, ctx, memdec_parent,
                                        wait_for=[store, base_futures["small"]]) for seed in cfg.run_seeds()}
            evaluation = submit_gpu(evaluate, cfg, run.data, ctx, wait_for=list(memdecs.values()))
            trained = {seed: f.result() for seed, f in memdecs.items()}
        bases = {size: f.result() for size, f in base_futures.items()}
        return run.publish(report.submit(cfg, bases, store.result(), trained, evaluation.result(), ctx))
