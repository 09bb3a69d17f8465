"""SUMO against AdamW, GaLore-AdamW and Muon: the Newton–Schulz-vs-SVD theory check beside the
training sweep (every optimizer × lr, seeds inside each task: the digits MLP, or LLaMA on C4 in the
paper profile; with text_lm, also the causal LM on the committed text corpus: its lr grid at seed 0,
then each optimizer's best lr at the other seeds), the step-time measurement, then the comparison
table, the plots and the claims."""
from __future__ import annotations

from prefect import flow

from flows.skeleton import method_run
from tasks.runners import submit_gpu
from tasks.sumo import (
    METHOD,
    data_version,
    lm_variant_name,
    optimizer_runs,
    report,
    step_time,
    text_lm_best_lrs,
    text_lm_lr_runs,
    text_lm_runs,
    theory,
    train_text_lm_seed,
    train_variant,
    training_devices,
)


@flow(name="sumo", log_prints=True)
def sumo_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    with method_run(METHOD, profile, overrides, data=data_version) as run:
        cfg = run.cfg
        theory_future = theory.submit(cfg)
        with (optimizer_runs(cfg, run.context) as optimizers, text_lm_runs(cfg, run.context) as lm_run,
              text_lm_lr_runs(cfg, run.context, lm_run) as lm_lr_runs):
            # LLaMA on C4 and the text LM spread over runtime.distributed's devices; the digits MLP
            # trains on one
            gpus = run.gpus if training_devices(cfg, run.distributed) > 1 else 1
            futures = [submit_gpu(train_variant, cfg, name, lr, run.context, optimizers[name], run.distributed,
                                  gpus=gpus) for name in cfg.optimizers for lr in cfg.lr_grid[name]]
            timing_future = submit_gpu(step_time, cfg, run.context)  # before the LM runs: as it was timed alone

            def lm_seed(name: str, lr: float, seed: int):
                return submit_gpu(train_text_lm_seed, cfg, name, lr, seed, run.context,
                                  lm_lr_runs[lm_variant_name(name, lr)], run.distributed, gpus=run.gpus)

            # the causal LM: every optimizer's lr grid at seed 0, then its best lr at the other seeds
            sweep = [lm_seed(name, lr, 0) for name in cfg.text_lm.optimizers
                     for lr in cfg.text_lm.lr_grid[name]] if lm_run else []
            lm_runs = [future.result() for future in sweep]
            more = [lm_seed(name, lr, seed) for name, lr in text_lm_best_lrs(cfg, lm_runs).items()
                    for seed in cfg.text_lm.seeds[1:]] if lm_run else []
            runs = [result for future in futures for result in future.result()]
            lm_runs += [future.result() for future in more]
        return run.publish(report.submit(cfg, runs, theory_future.result(), timing_future.result(), run.context,
                                         lm_runs, lm_run, lm_lr_runs))
