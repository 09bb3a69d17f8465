"""Parameters of the CodeMerge test-time adaptation experiment (spec (e) at small scale, with the
official code's schedule and merge of update (f))."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from paperline.config import MethodConfig, StrictModel

Corruption = Literal["gaussian_noise", "pixel_dropout", "blur", "contrast"]
Variant = Literal["source", "tent", "pl", "ema", "mos", "codemerge", "codemerge_rls", "codemerge_fixed"]
VARIANTS: tuple[Variant, ...] = Variant.__args__  # type: ignore[attr-defined]
PositiveInt = Annotated[int, Field(ge=1)]


class StreamConfig(StrictModel):
    """The test stream: `batches` batches drawn (with replacement, seeded) from the held-out images,
    each segment of `segment_batches` under the next corruption of `corruptions` (cycled)."""

    batches: PositiveInt = 120
    batch_size: PositiveInt = 32
    segment_batches: PositiveInt = 10
    corruptions: list[Corruption] = Field(["gaussian_noise", "pixel_dropout", "blur", "contrast"], min_length=1)
    noise_std: float = Field(0.35, ge=0)
    dropout_p: float = Field(0.4, ge=0, lt=1)
    blur_sigma: float = Field(1.0, gt=0)
    contrast: float = Field(0.3, gt=0, le=1)  # x → mean + c·(x − mean)
    early_batches: PositiveInt = 30  # spec (e)'s 30-batch stream; the whole stream is the long one
    tail_batches: PositiveInt = 30  # the last window: collapse or not

    @model_validator(mode="after")
    def _windows(self):
        for name in ("early_batches", "tail_batches"):
            if getattr(self, name) > self.batches:
                raise ValueError(f"{name} {getattr(self, name)} exceeds batches {self.batches}")
        return self


class CodeMergeConfig(MethodConfig):
    variants: list[Variant] = Field(list(VARIANTS), min_length=1)
    # `seeds` (MethodConfig's): each seed draws its own stream (images, order) and the fingerprints'
    # projections; the source model is the vit-source stage's, the same for every seed. Empty: [seed]
    stream: StreamConfig = StreamConfig()
    # the student's parameters: "backbone" all but the head (the official code adapts the image
    # backbone only), "norm" LayerNorm affine only; TENT always adapts the norms (its definition)
    adapt: Literal["backbone", "norm"] = "backbone"
    lr: float = Field(1e-4, gt=0)  # AdamW (the official 1e-7 is for a pretrained detector's backbone)
    weight_decay: float = Field(1e-3, ge=0)
    tent_lr: float = Field(1e-3, gt=0)
    threshold: float = Field(0.6, ge=0, le=1)  # pseudo-label confidence (spec (b)4)
    ema_momentum: float = Field(0.99, ge=0, lt=1)
    # checkpoint schedule in batches: the official {0, 8, 16, 32} samples at 8 a batch are batches
    # {0, 1, 2, 4}, then every `save_every` (spec (e): 3)
    save_at: list[Annotated[int, Field(ge=0)]] = [0, 1, 2, 4]
    save_every: PositiveInt = 3
    # once this many checkpoints are stored, the bank is merged again at every batch (official `count >= 3`)
    min_merge: Annotated[int, Field(ge=1)] = 3
    top_k: PositiveInt = 5
    ridge: float = Field(1e-3, gt=0)
    projection_dim: PositiveInt = 64  # d′ (spec (e))
    ties_keep: float = Field(0.9, gt=0, le=1)
    ties_scale: float = Field(0.85, gt=0)
    mos_temperature: float = Field(1.0, gt=0)
    collapse_fraction: float = Field(0.5, gt=0, le=1)  # collapsed: tail accuracy < this × source's
    checkpoint_every: PositiveInt = 20  # batches between resume checkpoints
    threads: PositiveInt = 1

    @model_validator(mode="after")
    def _primary(self):
        if "codemerge" not in self.variants or "source" not in self.variants:
            raise ValueError("variants must include 'codemerge' (the primary row) and 'source' (no adaptation: "
                             "the trivial baseline)")
        if len(set(self.variants)) != len(self.variants):
            raise ValueError(f"variants repeat a name: {self.variants}")
        return self
