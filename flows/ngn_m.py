"""NGN-M: sweep the step size c over decades × seeds for NGN, NGN-M, NGN-MD and SGD, SGDM,
Adam on each problem, then count per optimizer the decades of c that stay within 10% of its best."""
from __future__ import annotations

from prefect import flow

from flows.skeleton import method_run
from tasks.ngn_m import METHOD, data_version, optimizer_runs, report, sweep
from tasks.runners import submit_gpu


@flow(name="ngn_m", log_prints=True)
def ngn_m_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    # data_version fails on a real-data problem's missing files before any work
    with method_run(METHOD, profile, overrides, data=data_version) as run:
        cfg = run.cfg
        with optimizer_runs(cfg, run.context) as optimizers:
            futures = [submit_gpu(sweep, cfg, problem, optimizer, run.context, optimizers[optimizer])
                       for problem in cfg.problems for optimizer in cfg.optimizers_for(problem)]
            variants = [future.result() for future in futures]
        return run.publish(report.submit(cfg, variants, run.context))
