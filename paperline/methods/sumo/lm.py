"""LLaMA pretraining on C4 with one optimizer at one lr: the GaLore protocol the SUMO paper reports
(validation perplexity and memory; spec §c).

As GaLore's torchrun_main.py: the whole model in cfg.lm.dtype (bf16), `batch_size` sequences per
optimizer step in micro-batches (gradient accumulation), warm-up then cosine decay to
min_lr_ratio, no gradient clipping, no weight decay (the profile's), the low-rank methods on the
attention and MLP projections and AdamW on embeddings, norms and lm_head, every run on the same
data order (shuffle seed 42). Validation: the token-weighted mean loss over the first
cfg.lm.eval_tokens non-pad tokens of the (seed-42-shuffled) validation shards, every eval_every
steps and at the end; perplexity = exp(loss). (GaLore averages per-batch losses instead: the same
up to how padding weighs batches.) One process, one device: multi-GPU (DDP) is not built here.
"""
from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from paperline.data.c4 import C4Tokenizer, train_batches, validation_batches
from paperline.methods.sumo.config import SumoConfig
from paperline.methods.sumo.optimizers import build_optimizer, state_formula
from paperline.methods.sumo.train import lr_factor, run_seed
from paperline.nn.llama import LLAMA_SIZES, Llama, LlamaConfig, init_llama, lm_loss
from paperline.optim.hybrid import state_bytes, state_numel
from paperline.train.checkpoint import load_resumable, save_checkpoint

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


def llama_config(cfg: SumoConfig) -> LlamaConfig:
    size = LLAMA_SIZES[cfg.lm.model_size]
    return dataclasses.replace(size, vocab_size=cfg.lm.vocab_size) if cfg.lm.vocab_size else size


def make_llama(cfg: SumoConfig, seed: int, device: torch.device) -> Llama:
    model = init_llama(Llama(llama_config(cfg)), torch.Generator().manual_seed(seed))
    return model.to(device=device, dtype=DTYPES[cfg.lm.dtype])


@torch.no_grad()
def evaluate_lm(model: Llama, tokenizer: C4Tokenizer, cfg: SumoConfig, device: torch.device) -> float:
    total, count = 0.0, 0
    for tokens in validation_batches(cfg.lm.c4_dir, tokenizer, cfg.lm.micro_batch_size, cfg.lm.eval_tokens):
        tokens = tokens.to(device)
        n = int((tokens[:, 1:] != tokenizer.pad_id).sum())
        if n:
            total += float(lm_loss(model(tokens), tokens, tokenizer.pad_id)) * n
            count += n
    if not count:
        raise ValueError(f"{cfg.lm.c4_dir}: the validation shards gave no tokens to evaluate on")
    return total / count


def lm_fingerprint(cfg: SumoConfig, optimizer: str, lr: float, seed_index: int) -> dict:
    keep = {"seed", "steps", "batch_size", "rank", "update_period", "alpha", "sumo_momentum", "muon_momentum",
            "limiter", "weight_decay", "adamw_part_lr", "lr_schedule", "warmup_fraction", "min_lr_ratio",
            "log_every", "lm"}
    return {**cfg.model_dump(include=keep), "optimizer": optimizer, "lr": lr, "seed_index": seed_index}


def train_lm(cfg: SumoConfig, optimizer_name: str, lr: float, seed_index: int, device: torch.device,
             checkpoint_path: Path | None = None, progress: bool = False, stop_after: int | None = None) -> dict:
    """History and final metrics of one pretraining run (same keys as train.train_one's where they
    mean the same; final_test_loss is the validation loss). Resumes from checkpoint_path."""
    lm = cfg.lm
    seed = run_seed(cfg, seed_index)
    fingerprint = lm_fingerprint(cfg, optimizer_name, lr, seed_index)
    model_cfg = llama_config(cfg)
    tokenizer = C4Tokenizer(lm.tokenizer, lm.max_length, lm.pad_token, model_cfg.vocab_size)
    model = make_llama(cfg, seed, device)
    optimizer = build_optimizer(optimizer_name, model, lr, cfg, seed=seed)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(cfg, s))
    accumulation = cfg.batch_size // lm.micro_batch_size
    step, step_seconds, tokens_seen = 0, 0.0, 0
    window: list[float] = []  # losses of the steps since the last logged one
    history = {"step": [], "train_loss": []}
    evals = {"step": [], "val_loss": []}
    ckpt = load_resumable(checkpoint_path, fingerprint)
    if ckpt is not None:
        if ckpt["done"]:
            return ckpt["result"]
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        step, step_seconds, tokens_seen = ckpt["step"], ckpt["step_seconds"], ckpt["tokens_seen"]
        history, evals, window = ckpt["history"], ckpt["evals"], ckpt["window"]

    def checkpoint(done: bool, result: dict | None = None) -> None:
        if checkpoint_path is not None:
            save_checkpoint(checkpoint_path, {
                "fingerprint": fingerprint, "done": done, "step": step, "step_seconds": step_seconds,
                "tokens_seen": tokens_seen, "history": history, "evals": evals, "window": window,
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "result": result})

    stream = train_batches(lm.c4_dir, tokenizer, lm.micro_batch_size, lm.shuffle_seed, lm.shuffle_buffer,
                           skip_batches=step * accumulation)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    diverged = False
    bar = tqdm(total=cfg.steps, initial=step, disable=not progress, leave=False,
               desc=f"LLaMA-{lm.model_size} {optimizer_name} lr={lr:g}")
    while step < cfg.steps:
        micro_batches = [next(stream).to(device) for _ in range(accumulation)]  # data time not counted
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        started = time.perf_counter()
        loss_sum = 0.0
        for tokens in micro_batches:
            loss = lm_loss(model(tokens), tokens, tokenizer.pad_id) / accumulation
            loss.backward()
            loss_sum += float(loss.detach())
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        step_seconds += time.perf_counter() - started
        tokens_seen += sum(int((t != tokenizer.pad_id).sum()) for t in micro_batches)
        step += 1
        bar.update(1)
        window.append(loss_sum)
        if not math.isfinite(loss_sum):
            diverged = True
            break
        if step % cfg.log_every == 0 or step == cfg.steps:
            history["step"].append(step)
            history["train_loss"].append(float(np.mean(window)))
            window = []
            bar.set_postfix(loss=f"{history['train_loss'][-1]:.3f}")
        if step % lm.eval_every == 0 and step < cfg.steps:
            evals["step"].append(step)
            evals["val_loss"].append(evaluate_lm(model, tokenizer, cfg, device))
        if stop_after is not None and step >= stop_after:
            checkpoint(done=False)
            bar.close()
            return {}
        if step % cfg.checkpoint_every == 0:
            checkpoint(done=False)
    bar.close()
    val_loss = None if diverged else evaluate_lm(model, tokenizer, cfg, device)
    if val_loss is not None:
        evals["step"].append(step)
        evals["val_loss"].append(val_loss)
    limiter_hits = sum(s.get("limiter_hits", 0) for s in optimizer.state.values())
    sumo_matrices = len(model.matrix_parameters()) if optimizer_name.startswith("sumo") else 0
    tail = history["train_loss"][-max(1, len(history["train_loss"]) // 10):]
    result = {
        "optimizer": optimizer_name, "lr": lr, "seed_index": seed_index, "steps": step, "diverged": diverged,
        "history": history, "eval_history": evals,
        "final_train_loss": None if diverged else float(np.mean(tail)),
        "mean_train_loss": None if diverged else float(np.mean(history["train_loss"])),
        "final_test_loss": val_loss,
        "val_perplexity": None if val_loss is None else math.exp(val_loss),
        "final_test_accuracy": None,
        "tokens_seen": tokens_seen,
        "parameters": sum(p.numel() for p in model.parameters()),
        "state_floats": state_numel(optimizer), "state_bytes": state_bytes(optimizer),
        "state_floats_formula": state_formula(optimizer_name, model, cfg.rank),
        "step_ms": 1000 * step_seconds / max(step, 1),
        "peak_memory_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None,
        "limiter_fraction": limiter_hits / (step * sumo_matrices) if sumo_matrices and step else None,
    }
    checkpoint(done=True, result=result)
    return result


def llama_step_times(cfg: SumoConfig, device: torch.device) -> dict[str, dict[str, float]]:
    """Step time and state bytes of every optimizer of cfg on the configured LLaMA, round-robin in
    one process on random tokens of one micro-batch (timing.measure_step_times)."""
    from paperline.methods.sumo.timing import measure_step_times

    seed = run_seed(cfg, 0)
    vocab = llama_config(cfg).vocab_size

    def builder(name: str):
        def build():
            model = make_llama(cfg, seed, device)
            return model, build_optimizer(name, model, min(cfg.lr_grid[name]), cfg, seed=seed)
        return build

    gen = torch.Generator().manual_seed(seed)
    batches = [torch.randint(1, vocab, (cfg.lm.micro_batch_size, cfg.lm.max_length), generator=gen).to(device)
               for _ in range(2)]
    return measure_step_times({name: builder(name) for name in cfg.optimizers}, batches, cfg.timing_rounds,
                              cfg.timing_steps, loss_fn=lambda model, tokens: lm_loss(model(tokens), tokens, -1))
