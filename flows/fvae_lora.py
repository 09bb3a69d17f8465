"""FVAE-LoRA on a spurious-correlation task: a backbone trained on clean images and frozen (or a
local image model by path), y = [class ≥ threshold] with a corner patch agreeing with y in 95% of
the training images, a balanced test set; a linear probe, LoRA (peft) and FVAE-LoRA with its
ablations, every seed (one MLflow child per variant), average and worst-group accuracy with
t-intervals over seeds; the same comparison on text (a spurious token over Shakespeare speeches,
the lm-base stage's frozen causal LM as the backbone, the adapters on its q/v projections)."""
from __future__ import annotations

from prefect import flow

from flows.skeleton import method_run
from tasks.fvae_lora import METHOD, backbone, data, report, train_variant
from tasks.runners import submit_gpu


@flow(name="fvae_lora", log_prints=True)
def fvae_lora_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    with method_run(METHOD, profile, overrides, data=data) as run:
        cfg = run.cfg
        info = submit_gpu(backbone, cfg, run.data, run.context).result()
        variants = cfg.run_variants()
        with run.context.children({v: {"variant": v} for v in variants}) as children:
            futures = {v: submit_gpu(train_variant, cfg, v, run.data, info, run.context, children[v])
                       for v in variants}
            results = {v: f.result() for v, f in futures.items()}
            return run.publish(report.submit(cfg, results, info, run.data, run.context))
