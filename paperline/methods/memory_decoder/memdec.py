"""The Memory Decoder: its loss (spec §b.3), its training loop, and inference by mixing (§b.4).

    L = α · KL(p_kNN ‖ p_MemDec) + (1 − α) · CE(y)        (utils/cal_loss.py; α = 0.5)
    log p = logaddexp(log p_LM + log(1 − λ), log p_Mem + log λ)   i.e. p = (1 − λ) p_LM + λ p_Mem

The kNN targets are stored sparsely (per training position its k neighbour values and weights, the
official code keeps probabilities > 1e-10 as fp16) and scattered into dense rows per batch. The
loop reuses the shared LM loop's schedule and optimizer (paperline.train.lm) and checkpoints the
same way, so a killed run resumes exactly."""
from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from paperline.train.checkpoint import Resumable
from paperline.train.lm import LMTrainSettings, lr_at, make_optimizer


def memdec_loss(logits: torch.Tensor, labels: torch.Tensor, knn_probs: torch.Tensor, alpha: float) -> dict:
    """logits (N, V), labels (N,), knn_probs (N, V) rows summing to 1 (renormalized here as the
    official code does). KL is F.kl_div(log_softmax, p_kNN, 'batchmean'): the mean over tokens."""
    log_q = F.log_softmax(logits.float(), dim=-1)
    target = knn_probs / knn_probs.sum(-1, keepdim=True).clamp_min(1e-12)
    kl = F.kl_div(log_q, target, reduction="batchmean")
    ce = F.nll_loss(log_q, labels)
    return {"loss": alpha * kl + (1 - alpha) * ce, "kl": kl, "ce": ce}


def mix_log_probs(log_p_lm: torch.Tensor, log_p_mem: torch.Tensor, lam: float) -> torch.Tensor:
    """log((1 − λ) p_LM + λ p_Mem), stable in log space (λ = 0 gives the base LM exactly)."""
    if not 0 <= lam <= 1:
        raise ValueError(f"λ = {lam}: the mixing weight must lie in [0, 1]")
    with np.errstate(divide="ignore"):
        a, b = math.log1p(-lam) if lam < 1 else -math.inf, math.log(lam) if lam > 0 else -math.inf
    return torch.logaddexp(log_p_lm + a, log_p_mem + b)


def dense_targets(values: torch.Tensor, weights: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """(…, k) neighbour values and weights → (…, vocab) p_kNN rows."""
    out = torch.zeros(*values.shape[:-1], vocab_size)
    return out.scatter_add_(-1, values.long(), weights.float())


def train_memdec(model, tokens: np.ndarray, neighbour_values: np.ndarray, neighbour_weights: np.ndarray,
                 s: LMTrainSettings, alpha: float, device, checkpoint_path: str | Path | None = None,
                 fingerprint=None, on_log: Callable[[int, dict], None] | None = None) -> dict:
    """Train `model` on random windows of the domain training tokens; position i's kNN target is
    row i of neighbour_values / neighbour_weights (entry i of the datastore: next token i+1)."""
    if len(neighbour_values) != len(tokens) - 1:
        raise ValueError(f"{len(neighbour_values)} kNN targets for {len(tokens)} tokens: expected one per "
                         "position with a next token (len − 1)")
    vocab = model.config.vocab_size
    model.to(device).train()
    optimizer = make_optimizer(model, s)
    generator = torch.Generator().manual_seed(s.seed)
    fingerprint = {"settings": asdict(s), "alpha": alpha, "extra": fingerprint}
    run = Resumable(checkpoint_path, fingerprint, s.checkpoint_every, model=model, optimizer=optimizer,
                    generator=generator)
    record = run.resume() or {"step": 0, "history": {"step": [], "loss": [], "kl": [], "ce": []}}
    history = record["history"]
    tok = torch.as_tensor(np.asarray(tokens, dtype=np.int64))
    nv = torch.as_tensor(np.asarray(neighbour_values, dtype=np.int64))
    nw = torch.as_tensor(np.asarray(neighbour_weights, dtype=np.float32))
    T = s.block_size
    for step in range(record["step"], s.steps):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, s)
        starts = torch.randint(len(tok) - T - 1, (s.batch_size,), generator=generator)
        pos = starts[:, None] + torch.arange(T)
        x, y = tok[pos].to(device), tok[pos + 1]
        target = dense_targets(nv[pos], nw[pos], vocab).to(device)
        logits = model(x).logits
        parts = memdec_loss(logits.reshape(-1, vocab), y.reshape(-1).to(device), target.reshape(-1, vocab), alpha)
        optimizer.zero_grad(set_to_none=True)
        parts["loss"].backward()
        if s.grad_clip is not None:  # None: no clipping (as train_lm)
            torch.nn.utils.clip_grad_norm_(model.parameters(), s.grad_clip)
        optimizer.step()
        done = record["step"] = step + 1
        if not math.isfinite(parts["loss"].item()):
            raise FloatingPointError(f"memdec: loss is {parts['loss'].item()} at step {done}")
        if done % s.log_every == 0 or done == s.steps:
            history["step"].append(done)
            for key in ("loss", "kl", "ce"):
                history[key].append(parts[key].item())
            if on_log:
                on_log(done, {f"memdec_{k}": parts[k].item() for k in ("loss", "kl", "ce")})
        if run.due(done, s.steps):
            run.save(record)
    return {"history": history, "train_time_s": run.elapsed()}


def eval_windows(tokens: np.ndarray, block_size: int, count: int) -> np.ndarray:
    """Window starts, evenly spaced (the shared loop's validation windows, with their starts)."""
    last = len(tokens) - block_size - 1
    if last < 0:
        raise ValueError(f"{len(tokens)} tokens: fewer than block_size + 1 = {block_size + 1}")
    return np.unique(np.linspace(0, last, num=max(1, min(count, last + 1))).astype(np.int64))


@torch.no_grad()
def target_log_probs(model, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """log p(y_t | x_≤t) per position (B, T)."""
    logits = model.eval()(x).logits.float()
    return torch.log_softmax(logits, -1).gather(-1, y[..., None]).squeeze(-1)


def perplexity_sweep(log_p_base: torch.Tensor, log_p_other: torch.Tensor, lambdas, mask: torch.Tensor | None = None) -> dict:
    """Perplexity of (1 − λ) p_base + λ p_other over the (masked) positions, per λ."""
    out = {}
    for lam in lambdas:
        mixed = mix_log_probs(log_p_base, log_p_other, lam)
        if mask is not None:
            mixed = mixed[mask]
        out[lam] = float(torch.exp(-mixed.mean()))
    return out
