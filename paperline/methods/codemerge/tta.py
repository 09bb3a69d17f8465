"""The online test-time adaptation loop: every batch of the stream is first predicted by the
student (its accuracy is the reported one, spec (b)4), then the student takes one step. Variants:

- source: no adaptation;
- tent: entropy minimisation on the LayerNorm affine parameters;
- pl: self-training on the student's own confident predictions (> threshold);
- ema: a mean teacher (EMA of the student) gives the pseudo-labels;
- mos: MOS-like: the teacher is the average of every stored checkpoint weighted from a forward
  pass of each on the batch;
- codemerge / codemerge_rls / codemerge_fixed: the student is stored with its fingerprint (the
  anchor's mean penultimate feature on the batch), ridge leverage scores of the randomly projected
  fingerprints choose the top-K, merged by TIES (codemerge, codemerge_fixed) or RLS weights
  (codemerge_rls) into the teacher. The anchor drifts (the official `aggregate_model` loads each
  merge into its pretrained copy, so the next merge's Θ₀ and fingerprints come from the previous
  teacher) or stays the source (codemerge_fixed).

The schedule is the official loop's (`custom_multi_gpu_test`): the student is stored at the end of
a scheduled batch (after its step); at the start of every batch once `min_merge` checkpoints are
stored (`if count >= 3`), the bank is merged again (a fresh projection R, the top-K chosen again)
and the merge is that batch's teacher. The teacher's confident predictions (> threshold) are the
student's cross-entropy targets on its own outputs (update (f)); AdamW on the `adapt` parameters.
Before the first merge the teacher is the source model; the code's (`super_model is None`) is the
student itself, which at our lr (1e-3, not 1e-7) derails the student in those first batches (see
docs/methods/codemerge.md, "Compared with the official code").
"""
from __future__ import annotations

import copy
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call
from tqdm.auto import tqdm

from paperline.io import json_digest
from paperline.methods.codemerge import merge
from paperline.methods.codemerge.config import CodeMergeConfig
from paperline.methods.codemerge.corruptions import corruption_of
from paperline.nn.vit import ViT
from paperline.train.checkpoint import Resumable

# variant → (merge, anchor) for the bank-based variants
BANK_VARIANTS: dict[str, tuple[Literal["ties", "rls", "mos"], Literal["drifting", "fixed"]]] = {
    "mos": ("mos", "drifting"),  # no anchor used: MOS averages the checkpoints themselves
    "codemerge": ("ties", "drifting"),
    "codemerge_rls": ("rls", "drifting"),
    "codemerge_fixed": ("ties", "fixed"),
}


@dataclass
class StreamResult:
    variant: str
    accuracy: list[float]  # the student's, per batch, before its step on that batch
    teacher_accuracy: list[float] = field(default_factory=list)  # per batch, where a teacher exists
    merge_batches: list[int] = field(default_factory=list)
    selected: list[list[int]] = field(default_factory=list)  # bank indices merged, per merge
    merge_seconds: float = 0.0  # fingerprints, scoring and merging (MOS: its forward passes too)
    merge_forward_passes: int = 0  # forward passes spent for merging (per batch of the stream)
    bank_size: int = 0
    adapt_seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def adapted_parameters(model: ViT, which: str) -> list[torch.nn.Parameter]:
    """"norm": the LayerNorm affine parameters; "backbone": everything but the head."""
    if which == "norm":
        return [p for m in model.modules() if isinstance(m, torch.nn.LayerNorm) for p in m.parameters()]
    if which == "backbone":
        return [p for n, p in model.named_parameters() if not n.startswith("head.")]
    raise ValueError(f"unknown parameter set {which!r}")


def entropy(logits: torch.Tensor) -> torch.Tensor:
    p = logits.softmax(-1)
    return -(p * logits.log_softmax(-1)).sum(-1)


def pseudo_label_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, threshold: float) -> torch.Tensor | None:
    """Cross-entropy of the student on the teacher's confident predictions; None when none is."""
    conf, labels = teacher_logits.detach().softmax(-1).max(-1)
    keep = conf > threshold
    return F.cross_entropy(student_logits[keep], labels[keep]) if keep.any() else None


def clone_state(model: torch.nn.Module) -> merge.State:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@torch.no_grad()
def ema_update(teacher: torch.nn.Module, student: torch.nn.Module, momentum: float) -> None:
    for t, s in zip(teacher.parameters(), student.parameters()):
        t.mul_(momentum).add_(s, alpha=1 - momentum)


def save_due(batch: int, cfg: CodeMergeConfig) -> bool:
    return batch in cfg.save_at or batch % cfg.save_every == 0


class BankMerger:
    """The checkpoint bank of a merge variant and how it becomes the teacher."""

    def __init__(self, kind: str, anchor_mode: str, cfg: CodeMergeConfig, anchor: ViT,
                 generator: torch.Generator):
        self.kind, self.anchor_mode, self.cfg, self.anchor, self.generator = kind, anchor_mode, cfg, anchor, generator
        self.bank: list[merge.State] = []
        self.features: list[torch.Tensor] = []

    @torch.no_grad()
    def store(self, student: torch.nn.Module, x: torch.Tensor, result: StreamResult) -> None:
        self.bank.append(clone_state(student))
        if self.kind != "mos":  # the fingerprint: one forward pass of the anchor
            started = time.perf_counter()
            self.features.append(self.anchor.eval().features(x).mean(0).double())
            result.merge_seconds += time.perf_counter() - started
            result.merge_forward_passes += 1
        result.bank_size = len(self.bank)

    @torch.no_grad()
    def merged(self, x: torch.Tensor, scratch: torch.nn.Module, result: StreamResult) -> merge.State:
        started = time.perf_counter()
        if self.kind == "mos":
            weights = merge.mos_weights(self.bank, x, lambda s, b: functional_call(scratch, s, (b,)),
                                        self.cfg.mos_temperature)
            result.merge_forward_passes += len(self.bank)
            result.selected.append(list(range(len(self.bank))))
            state = merge.weighted_average(self.bank, weights)
        else:
            keys = merge.random_projection(torch.stack(self.features), self.cfg.projection_dim, self.generator)
            scores = merge.leverage_scores(keys, self.cfg.ridge)
            chosen = merge.select_top_k(scores, self.cfg.top_k)
            result.selected.append(chosen)
            picked = [self.bank[i] for i in chosen]
            if self.kind == "ties":
                state = merge.ties_merge(clone_state(self.anchor), picked, self.cfg.ties_keep, self.cfg.ties_scale)
            else:
                state = merge.weighted_average(picked, merge.rls_weights(scores[chosen]))
        result.merge_seconds += time.perf_counter() - started
        return state

    def remerge(self, x: torch.Tensor, batch: int, teacher: torch.nn.Module, scratch: torch.nn.Module,
                result: StreamResult) -> None:
        """At the start of every batch with enough checkpoints stored: merge the bank into the teacher
        and, with the drifting anchor, into the anchor too (recursive merging: the next merge's Θ₀
        and the next fingerprints come from this teacher)."""
        if len(self.bank) < self.cfg.min_merge:
            return
        state = self.merged(x, scratch, result)
        teacher.load_state_dict(state)
        if self.anchor_mode == "drifting" and self.kind != "mos":
            self.anchor.load_state_dict(state)
        result.merge_batches.append(batch)

    def progress(self) -> dict:
        return {"bank": self.bank, "features": self.features}

    def restore(self, saved: dict) -> None:
        self.bank, self.features = saved["bank"], saved["features"]


def run_stream(source: ViT, stream_x: np.ndarray, stream_y: np.ndarray, cfg: CodeMergeConfig, variant: str,
               checkpoint_path: str | Path | None = None, fingerprint: object = None,
               progress: bool = False) -> StreamResult:
    """One variant over the whole stream (the source model is not modified)."""
    student, teacher, anchor, scratch = (copy.deepcopy(source) for _ in range(4))
    for m in (teacher, anchor, scratch):
        m.requires_grad_(False)
    which = "norm" if variant == "tent" else cfg.adapt
    student.requires_grad_(False)
    params = adapted_parameters(student, which)
    for p in params:
        p.requires_grad_(True)
    opt = (torch.optim.Adam(params, lr=cfg.tent_lr) if variant == "tent"
           else torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay))
    # R, redrawn at every scoring call: the stream's only draw (nothing here reads torch's global RNG)
    generator = torch.Generator().manual_seed(cfg.seed)
    if variant not in ("source", "tent", "pl", "ema", *BANK_VARIANTS):
        raise ValueError(f"unknown variant {variant!r}")
    bank: BankMerger | None = None
    if variant in BANK_VARIANTS:
        kind, anchor_mode = BANK_VARIANTS[variant]
        bank = BankMerger(kind, anchor_mode, cfg, anchor, generator)

    run = Resumable(checkpoint_path, json_digest({"variant": variant, "fingerprint": fingerprint,
                                                  "cfg": cfg.model_dump(exclude={"variants", "source"})}),
                    every=cfg.checkpoint_every, student=student, teacher=teacher, anchor=anchor,
                    optimizer=opt, generator=generator)
    saved = run.resume()
    result = StreamResult(variant, [])
    start = 0
    if saved:
        start, result = saved["step"], StreamResult(**saved["result"])
        if bank:
            bank.restore(saved["bank"])
    n = len(stream_x)
    for t in tqdm(range(start, n), desc=variant, disable=not progress, initial=start, total=n):
        x, y = torch.as_tensor(stream_x[t]), torch.as_tensor(stream_y[t])
        if bank:  # this batch's teacher (merge time counted apart from adapt_seconds)
            bank.remerge(x, t, teacher, scratch, result)
        began = time.perf_counter()
        logits = student(x)
        result.accuracy.append(float((logits.argmax(1) == y).float().mean()))
        loss = None
        if variant == "tent":
            loss = entropy(logits).mean()
        elif variant == "pl":
            loss = pseudo_label_loss(logits, logits, cfg.threshold)
        elif variant != "source":
            with torch.no_grad():
                teacher_logits = teacher.eval()(x)
            result.teacher_accuracy.append(float((teacher_logits.argmax(1) == y).float().mean()))
            loss = pseudo_label_loss(logits, teacher_logits, cfg.threshold)
        if loss is not None:
            opt.zero_grad()
            loss.backward()
            opt.step()
        if variant == "ema":
            ema_update(teacher, student, cfg.ema_momentum)
        result.adapt_seconds += time.perf_counter() - began
        if bank and save_due(t, cfg):  # stored after its step, keyed by the anchor of this batch
            bank.store(student, x, result)
        if run.due(t + 1, n):
            run.save({"step": t + 1, "result": result.to_dict(), "bank": bank.progress() if bank else None})
    return result


def window_accuracy(accuracy: list[float], first: int | None = None, last: int | None = None) -> float:
    values = accuracy[:first] if first is not None else accuracy[-last:] if last is not None else accuracy
    return float(np.mean(values)) if values else float("nan")


def corruption_accuracy(result: StreamResult, cfg: CodeMergeConfig) -> dict[str, float]:
    """The student's accuracy per corruption over the stream."""
    by: dict[str, list[float]] = {}
    for t, a in enumerate(result.accuracy):
        by.setdefault(corruption_of(t, cfg.stream), []).append(a)
    return {k: float(np.mean(v)) for k, v in by.items()}
