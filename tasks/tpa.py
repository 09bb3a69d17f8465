"""Tasks of the TPA flow: the data (the prepared Shakespeare corpus, built when missing, or real
token files, versioned by content), one training task per attention variant (same budget, one
MLflow child each), the decode-time measurement, then the report."""
from __future__ import annotations

import dataclasses
import shutil
import sys
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.config import read_params
from paperline.methods.tpa import plots
from paperline.methods.tpa.config import TPAConfig
from paperline.methods.tpa.data import TokenData, open_data
from paperline.methods.tpa.formulas import attention_params, balanced_heads, cache_elements_per_token
from paperline.methods.tpa.summary import method_metrics
from tasks import track
from tasks.paths import models_dir, params_path, plots_dir
from tasks.publish import Report
from paperline.train.distributed import DistributedConfig
from tasks.runners import GPU_TAG, gpu_devices, gpu_slot

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


def train_settings(cfg: TPAConfig, seed: int):
    from paperline.train.lm import LMTrainSettings

    return LMTrainSettings.from_config(cfg.train, cfg.train.block_size, seed)


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
@task(name="tpa-train", tags=[GPU_TAG], cache_policy=NO_CACHE)
def train_variant(cfg: TPAConfig, variant: str, data: TokenData, ctx: track.RunContext,
                  distributed: DistributedConfig = DistributedConfig()) -> dict:
    """One attention variant trained with the run's budget: its row's measurements, with histories.
    `distributed` (params.yaml runtime.distributed) spreads the training over devices."""
    import torch

    from paperline.methods.tpa.models import build_model
    from paperline.train.lm import train_lm_spread

    torch.set_num_threads(cfg.threads)
    heads = balanced_heads(variant, cfg.shape)
    out = models_dir(METHOD) / variant
    with gpu_devices(distributed.devices) as devices, ctx.child(
            variant, params={"variant": variant, "heads": heads, "device": ",".join(map(str, devices)),
                             "shape": cfg.shape.model_dump(), "train": cfg.train.model_dump(),
                             "distributed": distributed.model_dump()}) as run:
        device = devices[0]
        model = build_model(variant, cfg.shape, data.vocab_size, cfg.train.block_size, cfg.seed)
        train, val = data.tokens(cfg.train.block_size)
        # the per-eval curve under its own name: the row's final val_loss is published on this run
        result = train_lm_spread(distributed, model, train, val, train_settings(cfg, cfg.seed), device,
                                 device_indices=[d.index for d in devices], checkpoint_path=out / "checkpoint.pt",
                                 fingerprint={"data": data.version}, progress=sys.stderr.isatty(),
                                 description=variant,
                                 on_log=lambda step, m: run.log_metrics({"val_loss_by_step": m["val_loss"]}, step)
                                 if "val_loss" in m else None)
        run.log_history("train_loss", result["history"]["step"], result["history"]["train_loss"])
        run.log_history("lr", result["history"]["step"], result["history"]["lr"])
        model.save_pretrained(out / "hf")
        if data.corpus_dir:  # the tokenizer beside the weights: the folder is a complete HF model
            shutil.copy(Path(data.corpus_dir) / "tokenizer.json", out / "hf" / "tokenizer.json")
        with torch.no_grad():  # the cache this model actually holds, per token per layer
            probe = torch.as_tensor(val[:8].astype("int64"))[None].to(device)
            measured_cache = model.eval()(probe, use_cache=True).cache.elements_per_token()
        for name in ("config.json", "model.safetensors"):
            if (out / "hf" / name).exists():
                run.log_artifact(out / "hf" / name, "model")
    return {"heads": heads, "val_loss": result["val_loss"], "val_perplexity": result["val_perplexity"],
            "final_train_loss": result["history"]["train_loss"][-1], "train_time_s": result["train_time_s"],
            "tokens_seen": result["tokens_seen"], "attention_params": model.attention_parameters(),
            "attention_params_formula": attention_params(variant, heads, cfg.shape),
            "kv_cache_elements_per_token_per_layer": measured_cache,
            "kv_cache_formula": cache_elements_per_token(variant, heads, cfg.shape),
            "total_params": sum(p.numel() for p in model.parameters()),
            "history": result["history"], "eval_history": result["eval_history"]}


@task(name="tpa-decode-time", tags=[GPU_TAG], cache_policy=NO_CACHE)
def decode_time(cfg: TPAConfig, data: TokenData, ctx: track.RunContext) -> dict:
    """Decode ms/token of every variant at each context length (fresh weights: time does not depend
    on them), round-robin in this one task."""
    import torch

    from paperline.methods.tpa.decode import decode_step_times
    from paperline.methods.tpa.models import build_model

    # one thread: single-token steps are small ops, and extra threads on a shared CPU only add noise
    torch.set_num_threads(1)
    positions = max(cfg.decode_contexts) + cfg.decode_tokens
    with gpu_slot() as device, ctx.child("decode_time", params={"device": str(device), "contexts": cfg.decode_contexts,
                                                                "tokens": cfg.decode_tokens}) as run:
        models = {v: build_model(v, cfg.shape, data.vocab_size, positions, cfg.seed) for v in cfg.variants}
        times = decode_step_times(models, cfg.decode_contexts, cfg.decode_tokens, cfg.decode_repeats, device, cfg.seed)
        run.log_metrics({f"{v}/ctx{c}/{k}": x for v, rows in times.items() for c, row in rows.items()
                         for k, x in row.items()})
    return times


@task(name="tpa-report", cache_policy=NO_CACHE)
def report(runs: dict[str, dict], times: dict, ctx: track.RunContext) -> Report:
    """The comparison against MHA, and the figures (PNG, and CSV for `dvc plots`)."""
    metrics = method_metrics(runs, times, ctx.profile)
    return Report(metrics, plots.write_all(metrics, runs, times, plots_dir(METHOD)))
