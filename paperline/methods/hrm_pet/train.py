"""One learner's class-incremental run on one task sequence (spec (b)): for each task t,
Stage 1: the TII head on frozen features (CE on task t's classes), then aligned on Gaussian samples
of every seen class; Stage 2: task t's LoRA (started as a copy of task t − 1's, HiDe's momentum mix
after training, gradient norm clipped, as the official code) and the unified classifier, CE on
task t's classes only, plus CTIRD for the CTIRD learners; then the unified classifier aligned on
Gaussian samples of every seen class's LoRA features (HiDe's TAP); then the seen tasks' test images
evaluated under every inference rule (paperline/methods/hrm_pet/evaluate.py). A checkpoint after
each task: a killed run resumes at the next task."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from paperline.io import json_digest
from paperline.methods.hrm_pet.config import HrmPetConfig
from paperline.methods.hrm_pet.data import TaskSequence
from paperline.methods.hrm_pet.evaluate import evaluate_task, evaluations
from paperline.methods.hrm_pet.model import ClassStats, LoraViT, TiiHead
from paperline.nn.vit import ViT
from paperline.seeds import seeded_init
from paperline.train.checkpoint import Resumable
from paperline.train.classifier import epoch_batches

NEG = float("-inf")


def restrict(logits: torch.Tensor, classes: list[int] | range) -> torch.Tensor:
    """Logits with every class outside `classes` set to −inf (CE over those classes only)."""
    keep = torch.full((logits.shape[-1],), NEG)
    keep[list(classes)] = 0.0
    return logits + keep


def relation(features: torch.Tensor, temperature: float) -> torch.Tensor:
    """W = rowsoftmax(cos(e_i, e_j)/T) over the batch."""
    e = F.normalize(features, dim=1)
    return (e @ e.T / temperature).softmax(1)


def old_tasks(tii_logits: torch.Tensor, class_task: torch.Tensor, task: int, k: int, rule: str) -> torch.Tensor:
    """(B, m) old tasks per sample, m = min(task, K) (spec (b) CTIRD, (g)1).
    paper: the top-m old tasks by the TII head's confidence (a task's probability is its classes' sum);
    code: the m old classes the TII head finds *least* likely (`topk(..., largest=False)`), mapped to
    their tasks (duplicates possible)."""
    m = min(task, k)
    old_classes = (class_task < task).nonzero().squeeze(1)
    if rule == "paper":
        probs = tii_logits[:, old_classes].softmax(1)
        per_task = torch.zeros(len(probs), task).index_add_(1, class_task[old_classes], probs)
        return per_task.topk(m, dim=1).indices
    least = tii_logits[:, old_classes].topk(m, dim=1, largest=False).indices
    return class_task[old_classes[least]]


def relation_targets(old_features: torch.Tensor, chosen: torch.Tensor, temperature: float) -> torch.Tensor:
    """CTIRD's targets (B, m, B): [:, k] is W_k = relation(e_k), e_k[i] sample i's feature under its
    own k-th old task's LoRA (`old_features` (t, B, d): the batch under every old task; `chosen` (B, m)).
    So W_k[i, j] = softmax_j cos(e_i under t_ik, e_j under t_jk), as the official code's
    `model(input, task_id=top5_id[:, k])` (HiDe's LoRA pool routes each sample by its own task id)."""
    rows = torch.arange(chosen.shape[0])
    return torch.stack([relation(old_features[chosen[:, k], rows], temperature) for k in range(chosen.shape[1])], 1)


def ctird_loss(features: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    """Σ_k KL(W_k ‖ W_t), each averaged over the batch's rows: `targets` (B, m, B) from `relation_targets`."""
    log_w_t = relation(features, temperature).clamp_min(1e-12).log()
    # a tensor: m ≥ 1 terms (sum's int start types it Tensor | int)
    return cast(torch.Tensor, sum(F.kl_div(log_w_t, targets[:, k], reduction="batchmean")
                                  for k in range(targets.shape[1])))


def _fit(params, steps_data, loss_fn, epochs: int, lr: float, cosine: bool, clip: float | None = None,
         optimizer: str = "adam") -> list[float]:
    """`epochs` passes of `steps_data(epoch)`; Adam, or the official TAP's SGD (momentum 0.9; its 5e-4
    weight decay is overridden by the parameter group's `args.weight_decay`, 0.0 as argparse parses
    `imr_lora.py`, where `--weight-decay` 0.0 is declared before `--weight_decay` 5e-4); the gradient
    norm clipped at `clip` when set."""
    params = list(params)
    opt = (torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=0.0) if optimizer == "sgd"
           else torch.optim.Adam(params, lr=lr))
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs) if cosine else None
    history = []
    for epoch in range(epochs):
        losses = []
        for i, batch in enumerate(steps_data(epoch)):
            loss = loss_fn(i, *batch)
            opt.zero_grad()
            loss.backward()
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(params, clip)
            opt.step()
            losses.append(loss.item())
        if sched:
            sched.step()
        history.append(float(np.mean(losses)) if losses else 0.0)
    return history


def align(head: torch.nn.Module, stats: ClassStats, seen: int, epochs: int, lr: float, per_class: int,
          batch_size: int, generator: torch.Generator, steps: int | None = None, optimizer: str = "adam",
          cosine: bool = False) -> list[float]:
    """A head aligned on fresh Gaussian samples of every stored class each epoch (CE over the seen
    classes), the first `steps` mini-batches of each epoch's shuffle (all when None)."""
    def data(epoch):
        x, y = stats.sample(per_class, generator)
        order = torch.randperm(len(x), generator=generator)
        return [(x[idx], y[idx]) for idx in order.split(batch_size)[:steps]]

    return _fit(head.parameters(), data, lambda i, x, y: F.cross_entropy(restrict(head(x), range(seen)), y),
                epochs, lr, cosine=cosine, optimizer=optimizer)


def tap(head: torch.nn.Module, stats: ClassStats, seen: int, old: int, cfg: HrmPetConfig,
        generator: torch.Generator) -> None:
    """The unified classifier aligned on every seen class's LoRA-feature Gaussians. sgd (the official
    `train_task_adaptive_prediction`): none on the first task (`old` = 0 classes before it), then
    5·batch samples per class and `old` (crct_num) mini-batches of 5·batch an epoch, SGD, cosine;
    adam: every task, `samples_per_class` per class, every sample in 4·batch mini-batches."""
    lora = cfg.lora
    if lora.tap_optimizer == "sgd":
        if old > 0:
            n = 5 * lora.batch_size
            align(head, stats, seen, lora.align_epochs, lora.align_lr, n, n, generator, steps=old,
                  optimizer="sgd", cosine=True)
        return
    align(head, stats, seen, lora.align_epochs, lora.align_lr, cfg.samples_per_class, lora.batch_size * 4, generator)


def learner_fingerprint(cfg: HrmPetConfig, learner: str, sequence: str, seed: int, backbone: str) -> str:
    return json_digest({"cfg": cfg.model_dump(exclude={"variants", "threads"}), "learner": learner,
                        "sequence": sequence, "seed": seed, "backbone": backbone})


def run_learner(cfg: HrmPetConfig, learner: str, seq: TaskSequence, backbone: ViT, seed: int,
                checkpoint: str | Path | None = None, fingerprint: str = "", progress: bool = False,
                on_task=None) -> dict:
    """The learner through every task of `seq`; returns {"evaluations": name -> per-task records,
    "history": per-task losses, "train_seconds", "tasks"}. `on_task(t, record)` after each task."""
    n_tasks, n_classes = len(seq.task_classes), seq.num_classes
    class_task = torch.as_tensor(seq.class_task())
    with seeded_init(seed):  # the initial weights from `seed`, whatever runs beside
        model = LoraViT(backbone, n_tasks, n_classes, cfg.lora.rank, cfg.lora.alpha, cfg.lora.targets,
                        cfg.lora.depth)
        tii = TiiHead(backbone.shape["dim"], n_classes, cfg.tii.hidden_ratio)
    dim = backbone.shape["dim"]
    tii_stats, lora_stats = ClassStats(dim, cfg.covariance_eps), ClassStats(dim, cfg.covariance_eps)
    gen = torch.Generator().manual_seed(seed)
    x_train, y_train = torch.as_tensor(seq.train_x), torch.as_tensor(seq.train_y)
    x_test, y_test = torch.as_tensor(seq.test_x), torch.as_tensor(seq.test_y)
    with torch.no_grad():
        frozen_train = model.features(x_train, None)
        frozen_test = model.features(x_test, None)
    rules = evaluations(cfg, learner)
    state: dict[str, Any] = {"task": 0, "evaluations": {name: [] for name in rules}, "history": [], "seconds": 0.0}
    # a checkpoint after every task (a task is the loop's step)
    run = Resumable(checkpoint or None, fingerprint, 1, model=model, tii=tii, tii_stats=tii_stats,
                    lora_stats=lora_stats, generator=gen)
    state = run.resume() or state
    bar = tqdm(total=n_tasks, initial=state["task"], desc=f"hrm_pet {learner} {seq.name} s{seed}", disable=not progress)
    while state["task"] < n_tasks:
        started = time.perf_counter()
        t = state["task"]
        classes = seq.task_classes[t]
        seen = classes[-1] + 1
        in_task = torch.isin(y_train, torch.as_tensor(classes))
        xt, yt, ft = x_train[in_task], y_train[in_task], frozen_train[in_task]

        # Stage 1: the TII head on the frozen features, then its alignment on the seen classes' Gaussians
        tii_loss = _fit(tii.parameters(),
                        lambda e: [(ft[i], yt[i]) for i in epoch_batches(len(yt), cfg.tii.batch_size, gen)],
                        lambda i, f, y: F.cross_entropy(restrict(tii(f), classes), y),
                        cfg.tii.epochs, cfg.tii.lr, cosine=False)
        tii_stats.add(ft, yt)
        align(tii, tii_stats, seen, cfg.tii.align_epochs, cfg.tii.align_lr, cfg.samples_per_class,
              cfg.tii.batch_size, gen)

        # Stage 2: task t's LoRA and the unified classifier (+ CTIRD), one fixed batch order: CTIRD's
        # two passes (the relation targets, then training) index the same batches, and every epoch
        # reuses the order (spec (g): the code's targets match the training batches in epoch 0 only)
        after = cfg.lora.momentum_timing == "after"
        if after and t > 0:
            model.copy_adapter(t - 1, t)
        if not after:
            model.mix_with_old(t, cfg.lora.momentum)
        order = epoch_batches(len(yt), cfg.lora.batch_size, gen)
        targets = None
        if learner != "plain" and t > 0 and cfg.ctird.weight > 0:
            rule = "code" if learner == "ctird_code" else "paper"
            targets = []
            with torch.no_grad():
                for idx in order:  # the first pass: the old tasks' relation matrices, per batch number
                    chosen = old_tasks(tii(ft[idx]), class_task, t, cfg.ctird.k, rule)  # (B, m)
                    old_features = torch.stack([model.features(xt[idx], s) for s in range(t)])  # (t, B, d)
                    targets.append(relation_targets(old_features, chosen, cfg.ctird.temperature))
        params = model.train_only(t)

        def lora_loss(i, x, y):
            f = model.features(x, t)
            loss = F.cross_entropy(restrict(model.head(f), classes), y)
            if targets is not None:
                loss = loss + cfg.ctird.weight * ctird_loss(f, targets[i], cfg.ctird.temperature)
            return loss

        model.train()
        lora_loss_history = _fit(params, lambda e: [(xt[idx], yt[idx]) for idx in order], lora_loss,
                                 cfg.lora.epochs, cfg.lora.lr, cosine=True, clip=cfg.lora.clip_grad)
        model.eval()
        if after:
            model.mix_with_old(t, cfg.lora.momentum)
        for p in model.parameters():
            p.requires_grad_(False)

        # TAP: the unified classifier aligned on every seen class's LoRA-feature Gaussians
        with torch.no_grad():
            lora_stats.add(model.features(xt, t), yt)
        model.head.requires_grad_(True)
        tap(model.head, lora_stats, seen, classes[0], cfg, gen)
        model.head.requires_grad_(False)

        # every inference rule on the seen tasks' test images
        with torch.no_grad():
            test = torch.isin(y_test, torch.arange(seen))
            tii_logits = tii(frozen_test[test])
            lora_logits = torch.stack([model.head(model.features(x_test[test], s)) for s in range(t + 1)])
        for name, record in evaluate_task(rules, cfg.crm, tii_logits, lora_logits, y_test[test], class_task,
                                          seen, t + 1).items():
            state["evaluations"][name].append(record)
        state["history"].append({"tii_loss": tii_loss[-1], "lora_loss": lora_loss_history[-1],
                                 "lora_loss_curve": lora_loss_history})
        state["seconds"] += time.perf_counter() - started
        state["task"] += 1
        if run.due(state["task"], n_tasks):
            run.save(state)
        if on_task:
            on_task(t, state)
        bar.update()
    bar.close()
    return {"evaluations": state["evaluations"], "history": state["history"], "train_seconds": state["seconds"],
            "tasks": n_tasks}
