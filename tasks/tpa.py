"""Tasks of the TPA flow: the data (the prepared Shakespeare corpus, built when missing, or real
token files, versioned by content), one training task per attention variant and seed (same budget,
one MLflow child per variant with a nested run per seed), the decode-time measurement, then the
report."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.config import read_params
from paperline.methods.tpa import plots
from paperline.methods.tpa.config import TPAConfig
from paperline.methods.tpa.data import TokenData, open_data
from paperline.methods.tpa.formulas import balanced_heads
from paperline.methods.tpa.summary import mean_curves, method_metrics
from paperline.metrics import numeric
from paperline.train.distributed import DistributedConfig
from tasks import track
from tasks.paths import params_path, plots_dir
from tasks.publish import Report
from tasks.runners import GPU_TAG
from tasks.unit import unit

METHOD = "tpa"


def data(cfg: TPAConfig) -> TokenData:
    """The checked token files, versioned by their contents (the digest of a large shard is cached
    by size and mtime). The default corpus is built here when `dvc repro` has not built it."""
    if not cfg.data.train_bin:
        from tasks import text_corpus

        corpus_cfg = text_corpus.resolve(read_params(params_path()))
        if Path(cfg.data.corpus_dir) == text_corpus.corpus_dir(corpus_cfg):
            text_corpus.ensure(corpus_cfg)
    prepared = open_data(cfg)
    return dataclasses.replace(prepared, version=track.data_version(prepared.files()))


def variant_runs(cfg: TPAConfig, ctx: track.RunContext):
    """A child run per variant, open while its seeds train (each seed's run nested under it); the
    variant's row, the mean over seeds, lands on it when the flow publishes."""
    return ctx.children({v: {"variant": v, "heads": balanced_heads(v, cfg.shape), "seeds": cfg.run_seeds()}
                         for v in cfg.variants})


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
@task(name="tpa-train", tags=[GPU_TAG], cache_policy=NO_CACHE)
def train_variant(cfg: TPAConfig, variant: str, seed: int, data: TokenData, ctx: track.RunContext,
                  variant_run: track.Run | None = None, distributed: DistributedConfig = DistributedConfig()) -> dict:
    """One attention variant at one seed, trained with the run's budget, on its MLflow run
    `<variant>/seed<seed>` (nested under `variant_run`), its model under models/tpa/<variant>/seed<seed>/:
    its measurements (the untrained model's validation loss too), with histories. `distributed`
    (params/runtime.yaml runtime.distributed) spreads the training over devices."""
    from paperline.methods.tpa.train import train_variant_seed

    heads = balanced_heads(variant, cfg.shape)
    with unit(ctx, f"{variant}/seed{seed}", {"variant": variant, "seed": seed, "heads": heads,
                                             "shape": cfg.shape.model_dump(), "train": cfg.train.model_dump(),
                                             "distributed": distributed.model_dump()},
              threads=cfg.threads, parent=variant_run, devices=distributed.devices) as u:
        run = u.run
        out = u.models / variant / f"seed{seed}"
        # the per-eval curve under its own name: the seed's final val_loss is logged on this run
        row, result = train_variant_seed(cfg, variant, seed, data, distributed, u.device, [d.index for d in u.devices],
                                         out, progress=sys.stderr.isatty(),
                                         on_log=lambda step, m: run.log_metrics({"val_loss_by_step": m["val_loss"]}, step)
                                         if "val_loss" in m else None)
        run.log_history("train_loss", result["history"]["step"], result["history"]["train_loss"])
        run.log_history("lr", result["history"]["step"], result["history"]["lr"])
        for name in ("config.json", "model.safetensors"):
            if (out / "hf" / name).exists():
                run.log_artifact(out / "hf" / name, "model")
        run.log_final(numeric(row))  # this seed's figures
    return {"variant": variant, "seed": seed, **row, "history": result["history"],
            "eval_history": result["eval_history"]}


@task(name="tpa-decode-time", tags=[GPU_TAG], cache_policy=NO_CACHE)
def decode_time(cfg: TPAConfig, data: TokenData, ctx: track.RunContext) -> dict:
    """Decode ms/token of every variant at each context length (fresh weights: time does not depend
    on them), round-robin in this one task."""
    from paperline.methods.tpa.decode import decode_step_times
    from paperline.methods.tpa.models import build_model

    positions = max(cfg.decode_contexts) + cfg.decode_tokens
    # one thread: single-token steps are small ops, and extra threads on a shared CPU only add noise
    with unit(ctx, "decode_time", {"contexts": cfg.decode_contexts, "tokens": cfg.decode_tokens}, threads=1) as u:
        run, device = u.run, u.device
        models = {v: build_model(v, cfg.shape, data.vocab_size, positions, cfg.seed) for v in cfg.variants}
        times = decode_step_times(models, cfg.decode_contexts, cfg.decode_tokens, cfg.decode_repeats, device, cfg.seed)
        run.log_metrics({f"{v}/ctx{c}/{k}": x for v, rows in times.items() for c, row in rows.items()
                         for k, x in row.items()})
    return times


@task(name="tpa-report", cache_policy=NO_CACHE)
def report(results: list[dict], times: dict, ctx: track.RunContext) -> Report:
    """The comparison against MHA (each variant's mean over its seeds) with the claims, and the
    figures (PNG, and CSV for `dvc plots`; validation curves the mean over seeds)."""
    metrics = method_metrics(results, times, ctx.profile)
    return Report(metrics, plots.write_all(metrics, mean_curves(results), times, plots_dir(METHOD)))
