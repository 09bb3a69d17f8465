"""QFFT: per training seed a short-CoT base model, then four fine-tunes from it with one budget —
SFT on [question; long response] (loss on the response), QFFT on the response alone, and both
under noise level IV (shuffled pairs) — evaluated on the same questions: accuracy, length,
long-CoT rate on easy/hard questions, RAK and AES against the base, means and spreads over the
seeds (one MLflow run per model, a run per seed under it)."""
from __future__ import annotations

from prefect import flow

from flows.skeleton import method_run
from tasks.qfft import (
    METHOD,
    VARIANTS,
    data,
    example_sets,
    finetune_variant,
    first_pass_sets,
    report,
    seeded,
    train_base,
)
from tasks.runners import submit_gpu


@flow(name="qfft", log_prints=True)
def qfft_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    # data: a malformed JSONL line fails before the run starts
    with method_run(METHOD, profile, overrides, data=data) as run:
        sets = example_sets.submit(run.cfg, run.data)
        seeds = run.cfg.run_seeds()
        with run.context.children({m: {"seeds": seeds} for m in ("base", *VARIANTS)}) as models:
            futures = {}
            for seed in seeds:
                cfg = seeded(run.cfg, seed)
                base = submit_gpu(train_base, cfg, run.data, run.context, models["base"], run.distributed,
                                  gpus=run.gpus, wait_for=[sets])
                tuning, ready = run.data, base
                if cfg.problems.first_pass == "base":  # the fine-tuning responses start from this seed's base's answers
                    tuning = ready = submit_gpu(first_pass_sets, cfg, run.data, run.distributed, gpus=run.gpus,
                                                wait_for=[base])
                tuned = {v: submit_gpu(finetune_variant, cfg, v, tuning, run.context, models[v], run.distributed,
                                       gpus=run.gpus, wait_for=[ready])
                         for v in VARIANTS}
                futures[seed] = (base, tuned)
            by_seed = {seed: {"base": base.result(), "variants": {v: f.result() for v, f in tuned.items()}}
                       for seed, (base, tuned) in futures.items()}
            return run.publish(report.submit(by_seed, run.context))
