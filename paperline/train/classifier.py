"""The small supervised loop: a classifier trained on (x, y) with cross-entropy, the caller's
optimizer (Adam or AdamW) stepping once a batch and its lr scheduler, if any, once an epoch.

Every epoch is one pass over the rows in the order of a permutation drawn from the caller's
seeded generator (the batch order is the run's own: no global RNG), in batches of `batch_size`,
the last one smaller or, with `drop_last`, left out (unless it is the only one). With a
`checkpoint` path the model, optimizer, scheduler and generator are saved every `every` epochs
(`paperline.train.checkpoint.Resumable`) and a killed run resumes at its last saved epoch.
Users: the digits MLPs of FVAE-LoRA (`fvae_lora/train.py: train_backbone`), LoTA-QAF
(`lota_qaf/pipeline.py: float_model`) and Model Shapley (`model_shapley/digits.py:
train_mlp`), and the vision methods' ViT (`paperline/train/vit.py`)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from paperline.train.checkpoint import Resumable


def epoch_batches(n: int, batch_size: int, generator: torch.Generator, drop_last: bool = False) -> list[torch.Tensor]:
    """One epoch's row indices, batch by batch: a permutation of range(n) drawn from `generator`."""
    if batch_size < 1:
        raise ValueError(f"batch_size {batch_size}: expected ≥ 1")
    batches = list(torch.randperm(n, generator=generator).split(batch_size))
    if drop_last and len(batches) > 1 and len(batches[-1]) < batch_size:
        batches.pop()
    return batches


def train_classifier(model: nn.Module, x: torch.Tensor, y: torch.Tensor, optimizer: torch.optim.Optimizer,
                     generator: torch.Generator, *, epochs: int, batch_size: int,
                     scheduler: torch.optim.lr_scheduler.LRScheduler | None = None, drop_last: bool = False,
                     checkpoint: str | Path | None = None, fingerprint: Any = None, every: int = 1,
                     progress: bool = False, desc: str = "classifier") -> dict:
    """Train `model` in place (left in eval mode); returns {"train_loss": each epoch's mean
    cross-entropy over its rows (a resumed run's earlier epochs included), "train_seconds": the
    training's wall time over every try}. `fingerprint`: the settings a checkpoint is valid for."""
    state: dict[str, Any] = {"model": model, "optimizer": optimizer, "generator": generator}
    if scheduler is not None:
        state["scheduler"] = scheduler
    run = Resumable(checkpoint, fingerprint, every=every, **state)
    record = run.resume() or {"step": 0, "history": []}
    bar = tqdm(total=epochs, initial=record["step"], desc=desc, disable=not progress, leave=False)
    while record["step"] < epochs:
        model.train()
        total, count = 0.0, 0
        for idx in epoch_batches(len(x), batch_size, generator, drop_last):
            idx = idx.to(x.device)
            loss = F.cross_entropy(model(x[idx]), y[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total, count = total + loss.item() * len(idx), count + len(idx)
        if scheduler is not None:
            scheduler.step()
        record["step"] += 1
        record["history"].append(total / count)
        bar.update()
        if run.due(record["step"], epochs):
            run.save(record)
    bar.close()
    model.eval()
    return {"train_loss": record["history"], "train_seconds": run.elapsed()}
