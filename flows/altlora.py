"""AltLoRA against LoRA-AdamW, LoRA-SGD-momentum, ScaledGD, AltLoRA+, a LoRA-Pro-like step and full
fine-tuning: the ill-conditioned linear adaptation (an lr sweep, then the rescaled initialisations,
one task per optimizer), the LM adaptation of the Shakespeare base to a second text (one task per
optimizer × lr, then each optimizer's best lr at every other seed) when the profile has one, the
step-time measurement, then the comparison."""
from __future__ import annotations

from prefect import flow

from flows.skeleton import method_run
from tasks.altlora import (
    METHOD,
    data_version,
    linear_variant,
    lm_repeats,
    lm_variant,
    optimizer_runs,
    report,
    step_time,
)
from tasks.runners import submit_gpu


@flow(name="altlora", log_prints=True)
def altlora_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    with method_run(METHOD, profile, overrides, data=data_version) as run:
        cfg = run.cfg
        with optimizer_runs(cfg, run.context) as optimizers:
            linear = [submit_gpu(linear_variant, cfg, name, run.context, optimizers[name]) for name in cfg.optimizers]
            lm = [submit_gpu(lm_variant, cfg, name, lr, run.context, optimizers[name], run.distributed,
                             gpus=run.gpus) for name in cfg.lm_optimizers for lr in cfg.lm.lr_grid[name]]
            timing = submit_gpu(step_time, cfg, run.context)
            lm_runs = [future.result() for future in lm]
            # every other seed at each optimizer's best lr of the sweep: the LM claims' pairs
            repeats = [submit_gpu(lm_variant, cfg, name, lr, run.context, optimizers[name], run.distributed, s,
                                  gpus=run.gpus) for name, lr, s in lm_repeats(cfg, lm_runs)]
            linear_runs = [r for future in linear for r in future.result()]
            lm_runs += [future.result() for future in repeats]
        return run.publish(report.submit(cfg, linear_runs, lm_runs, timing.result(), run.context))
