"""TPA / T6 against MHA, MQA, GQA and MLA: the corpus, every attention variant trained with the same
budget at ≈ equal attention parameters at each seed (one MLflow child per variant, a nested run per
seed), decode time per token at several context lengths, then the comparison table (each variant's
mean over its seeds, with Table 1's cache sizes at the paper's configs) and the claims."""
from __future__ import annotations

from prefect import flow

from flows.skeleton import method_run
from tasks.runners import submit_gpu
from tasks.tpa import METHOD, data, decode_time, report, train_variant, variant_runs


@flow(name="tpa", log_prints=True)
def tpa_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    # data: a missing, corrupt or mismatched corpus fails before the run starts
    with method_run(METHOD, profile, overrides, data=data) as run:
        with variant_runs(run.cfg, run.context) as runs:
            # seed by seed: where the trainings queue on one device, each seed's whole comparison
            # lands before the next seed's starts
            futures = [submit_gpu(train_variant, run.cfg, v, seed, run.data, run.context, runs[v], run.distributed,
                                  gpus=run.gpus) for seed in run.cfg.run_seeds() for v in run.cfg.variants]
            timing = submit_gpu(decode_time, run.cfg, run.data, run.context)
            results = [f.result() for f in futures]
            return run.publish(report.submit(results, timing.result(), run.context))
