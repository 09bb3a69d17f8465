"""SUMO against AdamW, GaLore-AdamW and Muon: the Newton–Schulz-vs-SVD theory check beside the
training sweep (every optimizer × lr, seeds inside each task: the digits MLP, or LLaMA on C4 in the
paper profile; with text_lm, also the causal LM on the committed text corpus), the step-time
measurement, then the comparison table and plots."""
from __future__ import annotations

from prefect import flow

from flows.skeleton import method_run
from tasks.runners import submit_gpu
from tasks.sumo import (METHOD, data_version, optimizer_runs, report, step_time, text_lm_runs, theory,
                        train_text_lm_variant, train_variant, training_devices)


@flow(name="sumo", log_prints=True)
def sumo_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    with method_run(METHOD, profile, overrides, data=data_version) as run:
        cfg = run.cfg
        theory_future = theory.submit(cfg)
        with optimizer_runs(cfg, run.context) as optimizers, text_lm_runs(cfg, run.context) as lm_run:
            # LLaMA on C4 and the text LM spread over runtime.distributed's devices; the digits MLP
            # trains on one
            gpus = run.gpus if training_devices(cfg, run.distributed) > 1 else 1
            futures = [submit_gpu(train_variant, cfg, name, lr, run.context, optimizers[name], run.distributed,
                                  gpus=gpus) for name in cfg.optimizers for lr in cfg.lr_grid[name]]
            timing_future = submit_gpu(step_time, cfg, run.context)  # before the LM runs: as it was timed alone
            lm_futures = [submit_gpu(train_text_lm_variant, cfg, name, lr, run.context, lm_run, run.distributed,
                                     gpus=run.gpus)
                          for name in cfg.text_lm.optimizers for lr in cfg.text_lm.lr_grid[name]] if lm_run else []
            runs = [result for future in futures for result in future.result()]
            lm_runs = [result for future in lm_futures for result in future.result()]
        return run.publish(report.submit(cfg, runs, theory_future.result(), timing_future.result(), run.context,
                                         lm_runs, lm_run))
