"""Tasks of the TPA flow: the data (the prepared Shakespeare corpus, built when missing, or real
token files), one training task per attention variant (same budget, one MLflow child each), the
decode-time measurement, then publishing the comparison."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.config import read_params
from paperline.io import write_json
from paperline.methods.tpa import plots
from paperline.methods.tpa.config import TPAConfig
from paperline.methods.tpa.formulas import PAPER_SHAPES, attention_params, balanced_heads, cache_elements_per_token
from tasks import track
from tasks.paths import (metrics_path, models_dir, params_path, plots_dir, project_path,
                         run_pointer_path)
from tasks.runners import GPU_TAG, gpu_slot

METHOD = "tpa"


@dataclass(frozen=True)
class TokenData:
    """Where the token files are and their vocabulary (picklable, passed to the tasks)."""

    train: str
    val: str
    vocab_size: int
    version: str
    corpus_dir: str | None = None


def prepare_data(cfg: TPAConfig) -> TokenData:
    """Fails here, before any work, on a missing, corrupt or mismatched corpus."""
    from paperline.data.text_corpus import load_corpus
    from paperline.data.tokens import open_tokens

    block = cfg.train.block_size
    if cfg.data.train_bin:
        train, val = project_path(cfg.data.train_bin), project_path(cfg.data.val_bin)
        for path in (train, val):
            open_tokens(path, cfg.data.vocab_size, block)  # checks size, length and ids
        import hashlib

        digest = hashlib.sha256()
        for path in (train, val):  # real shards are large: hash names and sizes, as SUMO's C4
            digest.update(f"{path.name}:{path.stat().st_size}".encode())
        return TokenData(str(train), str(val), cfg.data.vocab_size, "tokens-sha256:" + digest.hexdigest()[:16])
    from tasks import text_corpus

    corpus_cfg = text_corpus.resolve(read_params(params_path()))
    folder = project_path(cfg.data.corpus_dir)
    if folder == text_corpus.corpus_dir(corpus_cfg):
        text_corpus.ensure(corpus_cfg)  # dvc repro runs the text-corpus stage first; a bare flow run builds it
    corpus = load_corpus(folder, block)
    return TokenData(str(folder / "train.bin"), str(folder / "val.bin"), corpus.vocab_size,
                     track.data_version([folder / "train.bin", folder / "val.bin", folder / "tokenizer.json"]),
                     str(folder))


def _tokens(data: TokenData, block: int):
    from paperline.data.tokens import open_tokens

    return open_tokens(data.train, data.vocab_size, block), open_tokens(data.val, data.vocab_size, block)


def train_settings(cfg: TPAConfig, seed: int):
    from paperline.train.lm import LMTrainSettings

    return LMTrainSettings.from_config(cfg.train, cfg.train.block_size, seed)


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
@task(name="tpa-train", tags=[GPU_TAG], cache_policy=NO_CACHE)
def train_variant(cfg: TPAConfig, variant: str, data: TokenData, parent: track.Run, profile: str) -> dict:
    import torch

    from paperline.methods.tpa.models import build_model
    from paperline.train.lm import train_lm

    torch.set_num_threads(cfg.threads)
    heads = balanced_heads(variant, cfg.shape)
    out = models_dir(METHOD) / variant
    with gpu_slot() as device, track.child_run(parent, METHOD, variant, profile, data.version,
                                               params={"variant": variant, "heads": heads, "device": str(device),
                                                       "shape": cfg.shape.model_dump(), "train": cfg.train.model_dump()}) as run:
        model = build_model(variant, cfg.shape, data.vocab_size, cfg.train.block_size, cfg.seed)
        train, val = _tokens(data, cfg.train.block_size)
        result = train_lm(model, train, val, train_settings(cfg, cfg.seed), device,
                          checkpoint_path=out / "checkpoint.pt", fingerprint={"data": data.version},
                          progress=sys.stderr.isatty(), description=variant,
                          on_log=lambda step, m: run.log_metrics(m, step) if "val_loss" in m else None)
        run.log_history("train_loss", result["history"]["step"], result["history"]["train_loss"])
        run.log_history("lr", result["history"]["step"], result["history"]["lr"])
        model.save_pretrained(out / "hf")
        if data.corpus_dir:  # the tokenizer beside the weights: the folder is a complete HF model
            import shutil

            shutil.copy(Path(data.corpus_dir) / "tokenizer.json", out / "hf" / "tokenizer.json")
        with torch.no_grad():  # the cache this model actually holds, per token per layer
            probe = torch.as_tensor(val[:8].astype("int64"))[None].to(device)
            measured_cache = model.eval()(probe, use_cache=True).cache.elements_per_token()
        row = {"heads": heads, "val_loss": result["val_loss"], "val_perplexity": result["val_perplexity"],
               "final_train_loss": result["history"]["train_loss"][-1], "train_time_s": result["train_time_s"],
               "tokens_seen": result["tokens_seen"], "attention_params": model.attention_parameters(),
               "attention_params_formula": attention_params(variant, heads, cfg.shape),
               "kv_cache_elements_per_token_per_layer": measured_cache,
               "kv_cache_formula": cache_elements_per_token(variant, heads, cfg.shape),
               "total_params": sum(p.numel() for p in model.parameters())}
        # the final values at the last step (val_loss is already there, logged by the loop)
        run.log_metrics({k: v for k, v in row.items() if isinstance(v, (int, float)) and k != "val_loss"},
                        step=cfg.train.steps)
        for name in ("config.json", "model.safetensors"):
            if (out / "hf" / name).exists():
                run.log_artifact(out / "hf" / name, "model")
    return row | {"history": result["history"], "eval_history": result["eval_history"]}


@task(name="tpa-decode-time", tags=[GPU_TAG], cache_policy=NO_CACHE)
def decode_time(cfg: TPAConfig, data: TokenData, parent: track.Run, profile: str) -> dict:
    """Decode ms/token of every variant at each context length (fresh weights: time does not depend
    on them), round-robin in this one task."""
    import torch

    from paperline.methods.tpa.decode import decode_step_times
    from paperline.methods.tpa.models import build_model

    # one thread: single-token steps are small ops, and extra threads on a shared CPU only add noise
    torch.set_num_threads(1)
    positions = max(cfg.decode_contexts) + cfg.decode_tokens
    with gpu_slot() as device, track.child_run(parent, METHOD, "decode_time", profile, data.version,
                                               params={"device": str(device), "contexts": cfg.decode_contexts,
                                                       "tokens": cfg.decode_tokens}) as run:
        models = {v: build_model(v, cfg.shape, data.vocab_size, positions, cfg.seed) for v in cfg.variants}
        times = decode_step_times(models, cfg.decode_contexts, cfg.decode_tokens, cfg.decode_repeats, device, cfg.seed)
        run.log_metrics({f"{v}/ctx{c}/{k}": x for v, rows in times.items() for c, row in rows.items()
                         for k, x in row.items()})
    return times


def summarize(cfg: TPAConfig, runs: dict[str, dict], times: dict) -> dict:
    from paperline.methods.tpa.decode import ratios_vs

    ratios = ratios_vs(times, "mha")
    summary: dict = {}
    for v, run in runs.items():
        row = {k: x for k, x in run.items() if k not in ("history", "eval_history")}
        for size, shape in PAPER_SHAPES.items():
            row[f"kv_cache_{size}"] = cache_elements_per_token(v, balanced_heads(v, shape), shape)
            row[f"heads_{size}"] = balanced_heads(v, shape)
        for c, t in times.get(v, {}).items():
            row[f"decode_ms_per_token_ctx{c}"] = t["ms_per_token"]
            if ratios:
                row[f"decode_time_vs_mha_ctx{c}"] = ratios[v][c]["time_vs_mha"]
        summary[v] = row
    if "mha" in runs:
        for v in runs:
            summary[v]["val_loss_vs_mha"] = runs[v]["val_loss"] / runs["mha"]["val_loss"]
            summary[v]["kv_cache_vs_mha"] = (runs[v]["kv_cache_elements_per_token_per_layer"]
                                             / runs["mha"]["kv_cache_elements_per_token_per_layer"])
        if "tpa" in runs:
            summary["cache_ratio_mha_over_tpa"] = (runs["mha"]["kv_cache_elements_per_token_per_layer"]
                                                   / runs["tpa"]["kv_cache_elements_per_token_per_layer"])
    summary["best_val_loss_variant"] = min(runs, key=lambda v: runs[v]["val_loss"])
    return summary


@task(name="tpa-publish", cache_policy=NO_CACHE)
def publish(cfg: TPAConfig, runs: dict[str, dict], times: dict, parent: track.Run) -> dict:
    """metrics/tpa.json, the plots (PNG for MLflow and DVC, CSV for `dvc plots`), mlflow_run.json."""
    summary = summarize(cfg, runs, times)
    out = plots_dir(METHOD)
    paths = [plots.plot_val_curves(runs, out / "val_loss.png"), plots.plot_cache(summary, out / "kv_cache.png"),
             plots.plot_decode(times, out / "decode_time.png")]
    paths += plots.write_tables(runs, times, out)
    for path in paths:
        parent.log_artifact(path, "plots")
    parent.log_metrics({f"{v}/{k}": x for v, row in summary.items() if isinstance(row, dict)
                        for k, x in row.items() if isinstance(x, (int, float))})
    write_json(metrics_path(METHOD), summary)
    write_json(run_pointer_path(METHOD), track.run_pointer(parent, METHOD))
    return summary
