"""Training and evaluation of the LM: the warm-up (AdamW on a random subset, its state kept) and the
fine-tuning on each selection with the same budget (same steps, batch size and lr; continuing from
the warm-up weights and AdamW moments, the state the influences were computed at) [I: the paper
fine-tunes the base model; ours is only warmed up, so the warm-up is its base].

A checkpoint (model, optimizer, step, history) is written every `checkpoint_every` steps and at
the end; a killed run resumes from it, a finished one is loaded as is.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Sequence

import torch

from paperline.methods.influence_distillation.model import InfluenceLM, TokenizedSet, masked_lm_loss
from paperline.train.checkpoint import Resumable


def make_optimizer(model: InfluenceLM, cfg, lr: float) -> torch.optim.AdamW:
    return torch.optim.AdamW(model.parameters(), lr=lr, betas=tuple(cfg.betas), eps=cfg.eps,
                             weight_decay=cfg.weight_decay)


def epoch_batches(n: int, batch_size: int, epochs: int, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(epochs):
        perm = torch.randperm(n, generator=g)
        batches += [perm[i:i + batch_size] for i in range(0, n, batch_size)]
    return batches


def train(model: InfluenceLM, optimizer: torch.optim.Optimizer, data: TokenizedSet, index: Sequence[int],
          batches: list[torch.Tensor], checkpoint_path: Path | None, fingerprint: dict,
          checkpoint_every: int = 50, stop_after: int | None = None, micro_batch_size: int | None = None) -> dict:
    """Run the minibatch steps `batches` (positions into `index`); returns the loss history.
    `micro_batch_size` accumulates each step's gradient over slices of that many rows (the paper's
    batch of 128 at length 2048 fits no GPU at once), weighted so the step equals the whole batch's.
    `stop_after` ends early without the final checkpoint (tests simulate a kill with it)."""
    positions = torch.as_tensor(list(index), dtype=torch.long)
    run = Resumable(checkpoint_path, fingerprint, checkpoint_every, model=model, optimizer=optimizer)
    record = run.resume() or {"step": 0, "history": {"step": [], "train_loss": []}, "done": False}
    if record["done"]:
        return record["history"]
    step, history = record["step"], record["history"]

    model.train()
    while step < len(batches):
        rows = positions[batches[step]]
        size = micro_batch_size or len(rows)
        # the loss is the token mean over the whole batch: each slice's mean weighted by its share
        total = float(data.mask[rows, 1:].sum().clamp_min(1))
        optimizer.zero_grad(set_to_none=True)
        loss_value = 0.0
        for start in range(0, len(rows), size):
            tokens, mask = data.batch(rows[start:start + size])
            share = float(mask[:, 1:].sum()) / total
            loss = masked_lm_loss(model(tokens), tokens, mask) * share
            loss.backward()
            loss_value += float(loss.detach())
        optimizer.step()
        step += 1
        history["step"].append(step)
        history["train_loss"].append(loss_value)
        if stop_after is not None and step >= stop_after:
            return history
        if run.due(step, len(batches)):
            run.save({"step": step, "history": history, "done": step == len(batches)})
    return history


@torch.no_grad()
def evaluate(model: InfluenceLM, data: TokenizedSet, batch_size: int, choice_ids: Sequence[int] | None = None) -> dict:
    """Assistant-token loss and next-token accuracy (teacher forced) on `data`; with `choice_ids`
    (the option letters' token ids: MMLU-like sets) also the accuracy of the most likely letter at
    the first answer token."""
    model.eval()
    loss_sum = correct = count = 0.0
    choice_hits = choice_total = 0
    for start in range(0, len(data), batch_size):
        tokens, mask = data.batch(range(start, min(start + batch_size, len(data))))
        logits = model(tokens).float()
        targets, weight = tokens[:, 1:], mask[:, 1:]
        ce = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), targets, reduction="none")
        loss_sum += float((ce * weight).sum())
        correct += float(((logits[:, :-1].argmax(-1) == targets) & weight).sum())
        count += float(weight.sum())
        if choice_ids is not None:
            first = weight.float().argmax(1)  # position predicting the first answer token
            rows = torch.arange(len(tokens))
            picked = logits[rows, first][:, list(choice_ids)].argmax(1)
            truth = targets[rows, first]
            choice_hits += int((torch.tensor(list(choice_ids))[picked.cpu()] == truth.cpu()).sum())
            choice_total += len(tokens)
    model.train()
    out = {"loss": loss_sum / max(count, 1), "token_accuracy": correct / max(count, 1)}
    if choice_ids is not None:
        out["choice_accuracy"] = choice_hits / max(choice_total, 1)
    return out


def clone_state(model: InfluenceLM, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    return copy.deepcopy(model.state_dict()), copy.deepcopy(optimizer.state_dict())
