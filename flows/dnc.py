"""Deep neural collapse under cross-entropy: train deep UFMs over (K, L, d, seed), compare the
trained objectives with the closed-form DNC value f_DNC* and the rank-2 competitor f_cos*."""
from __future__ import annotations

from prefect import flow

from flows.skeleton import method_run
from tasks.dnc import METHOD, report, train_group
from tasks.runners import submit_gpu


@flow(name="dnc", log_prints=True)
def dnc_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    # no data: the features are free parameters of the model
    with method_run(METHOD, profile, overrides) as run:
        futures = [submit_gpu(train_group, run.cfg, K, L, run.context)
                   for K in run.cfg.classes for L in run.cfg.depths]
        results = [result for future in futures for result in future.result()]
        return run.publish(report.submit(run.cfg, results, run.context))
