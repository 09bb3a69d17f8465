"""QFFT: a short-CoT base model, then four fine-tunes from it with one budget — SFT on
[question; long response] (loss on the response), QFFT on the response alone, and both under
noise level IV (shuffled pairs) — evaluated on the same questions: accuracy, length, long-CoT
rate on easy/hard questions, RAK and AES against the base."""
from __future__ import annotations

from prefect import flow

from flows.skeleton import method_run
from paperline.methods.qfft.pipeline import VARIANTS
from tasks.qfft import METHOD, data, example_sets, finetune_variant, first_pass_sets, report, train_base
from tasks.runners import submit_gpu


@flow(name="qfft", log_prints=True)
def qfft_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    # data: a malformed JSONL line fails before the run starts
    with method_run(METHOD, profile, overrides, data=data) as run:
        sets = example_sets.submit(run.cfg, run.data)
        base = submit_gpu(train_base, run.cfg, run.data, run.context, run.distributed, gpus=run.gpus, wait_for=[sets])
        ready = base
        if run.cfg.problems.first_pass == "base":  # the fine-tuning responses start from the base's own answers
            ready = submit_gpu(first_pass_sets, run.cfg, run.data, run.distributed, gpus=run.gpus, wait_for=[base])
        tuned = {v: submit_gpu(finetune_variant, run.cfg, v, run.data, run.context, run.distributed, gpus=run.gpus,
                               wait_for=[ready])
                 for v in VARIANTS}
        return run.publish(report.submit(base.result(), {v: f.result() for v, f in tuned.items()}, run.context))
