"""One attention variant at one seed: built from the seed, scored before training (the trivial
baseline), trained with the run's budget, saved as a complete HF folder, and measured (its cache
per token, its parameters, against the formulas)."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable

import torch

from paperline.io import atomic_dir
from paperline.methods.tpa.config import TPAConfig
from paperline.methods.tpa.data import TokenData
from paperline.methods.tpa.formulas import attention_params, balanced_heads, cache_elements_per_token
from paperline.train.distributed import DistributedConfig


def train_variant_seed(cfg: TPAConfig, variant: str, seed: int, data: TokenData, distributed: DistributedConfig,
                       device: Any, device_indices: list, out: Path, on_log: Callable[[int, dict], None],
                       progress: bool = False) -> tuple[dict, dict]:
    """(the seed's row, the training loop's result); the model's HF folder in `out/hf` (with the
    corpus's tokenizer: a complete model), its checkpoint in `out/checkpoint.pt`."""
    from paperline.methods.tpa.models import build_model
    from paperline.train.lm import LMTrainSettings, evaluate, train_lm_spread, validation_windows

    heads = balanced_heads(variant, cfg.shape)
    model = build_model(variant, cfg.shape, data.vocab_size, cfg.train.block_size, seed)
    train, val = data.tokens(cfg.train.block_size)
    # the trivial baseline: this model before training, on the windows every evaluation uses
    windows = validation_windows(val, cfg.train.block_size, cfg.train.eval_windows)
    initial_val_loss = evaluate(model.to(device), windows, cfg.train.batch_size, device)
    model.cpu()  # training (in process or spawned) moves it where it runs
    result = train_lm_spread(distributed, model, train, val, LMTrainSettings.from_config(cfg.train, cfg.train.block_size, seed), device,
                             device_indices=device_indices, checkpoint_path=out / "checkpoint.pt",
                             fingerprint={"data": data.version}, progress=progress,
                             description=f"{variant}/seed{seed}", on_log=on_log)
    with atomic_dir(out / "hf") as hf:  # a kill mid-save leaves the previous folder, never half of one
        model.save_pretrained(hf)
        if data.corpus_dir:  # the tokenizer beside the weights: the folder is a complete HF model
            shutil.copy(Path(data.corpus_dir) / "tokenizer.json", hf / "tokenizer.json")
    with torch.no_grad():  # the cache this model actually holds, per token per layer
        probe = torch.as_tensor(val[:8].astype("int64"))[None].to(device)
        measured_cache = model.eval()(probe, use_cache=True).cache.elements_per_token()
    row = {"heads": heads, "val_loss": result["val_loss"], "val_perplexity": result["val_perplexity"],
           "initial_val_loss": initial_val_loss, "final_train_loss": result["history"]["train_loss"][-1],
           "train_time_s": result["train_time_s"], "tokens_seen": result["tokens_seen"],
           "attention_params": model.attention_parameters(),
           "attention_params_formula": attention_params(variant, heads, cfg.shape),
           "kv_cache_elements_per_token_per_layer": measured_cache,
           "kv_cache_formula": cache_elements_per_token(variant, heads, cfg.shape),
           "total_params": sum(p.numel() for p in model.parameters())}
    return row, result
