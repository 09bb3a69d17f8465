"""TPA / T6 against MHA, MQA, GQA and MLA: the corpus, every attention variant trained with the same
budget at ≈ equal attention parameters (one MLflow child each), decode time per token at several
context lengths, then the comparison table (with Table 1's cache sizes at the paper's configs)."""
from __future__ import annotations

from prefect import flow

from flows.skeleton import method_run
from tasks.runners import submit_gpu
from tasks.tpa import METHOD, data, decode_time, report, train_variant


@flow(name="tpa", log_prints=True)
def tpa_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    # data: a missing, corrupt or mismatched corpus fails before the run starts
    with method_run(METHOD, profile, overrides, data=data) as run:
        futures = {v: submit_gpu(train_variant, run.cfg, v, run.data, run.context, run.distributed,
                                 gpus=run.gpus) for v in run.cfg.variants}
        timing = submit_gpu(decode_time, run.cfg, run.data, run.context)
        runs = {v: f.result() for v, f in futures.items()}
        return run.publish(report.submit(runs, timing.result(), run.context))
