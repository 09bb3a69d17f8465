"""SUMO against AdamW, GaLore-AdamW and Muon: the Newton–Schulz-vs-SVD theory check beside the
training sweep (every optimizer × lr, seeds inside each task: the digits MLP, or LLaMA on C4 in the
paper profile), the step-time measurement, then the comparison table and plots."""
from __future__ import annotations

from prefect import flow

from flows.skeleton import method_run
from tasks.runners import submit_gpu
from tasks.sumo import METHOD, data_version, optimizer_runs, report, step_time, theory, train_variant


@flow(name="sumo", log_prints=True)
def sumo_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    with method_run(METHOD, profile, overrides, data=data_version) as run:
        cfg = run.cfg
        theory_future = theory.submit(cfg)
        with optimizer_runs(cfg, run.context) as optimizers:
            futures = [submit_gpu(train_variant, cfg, name, lr, run.context, optimizers[name])
                       for name in cfg.optimizers for lr in cfg.lr_grid[name]]
            timing_future = submit_gpu(step_time, cfg, run.context)
            runs = [result for future in futures for result in future.result()]
        return run.publish(report.submit(cfg, runs, theory_future.result(), timing_future.result(), run.context))
