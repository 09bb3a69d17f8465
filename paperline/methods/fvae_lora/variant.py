"""One variant's seeds, as the flow's variant task runs them: its model (the frozen image backbone,
or for a text variant `text_<variant>` the frozen causal LM), the task each seed trains on, and
each seed's result kept as a finished unit (`<folder>/<variant>/seed<s>.json`, written for the
settings that make it), so a killed run resumes at the next seed."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from paperline.io import json_digest
from paperline.methods.fvae_lora.config import TEXT_PREFIX, VARIANT_SPECS, FvaeLoraConfig
from paperline.methods.fvae_lora.data import CleanSplit, SpuriousTask, spurious_task
from paperline.methods.fvae_lora.train import adapt, load_backbone
from paperline.seeds import seeded_init
from paperline.train.records import finished_unit

if TYPE_CHECKING:  # the text modules load only for a text variant
    from paperline.methods.fvae_lora.text import TextData


@dataclass(frozen=True)
class VariantRun:
    config: FvaeLoraConfig  # the image task's, or for a text variant cfg.text_config()
    variant: str  # its name in VARIANT_SPECS (the text prefix dropped)
    modality: str  # "image" | "text"
    model: nn.Module  # the frozen backbone every seed adapts a copy of
    folder: Path  # the seeds' records: <folder>/<variant>/seed<s>.json
    fingerprint: str
    task_of: Callable[[int], SpuriousTask]

    def seed_result(self, seed: int, device: torch.device | str = "cpu") -> dict:
        """The seed's `train.adapt` result: read back when a killed run finished it, else trained."""
        return finished_unit(self.folder / self.variant / f"seed{seed}.json", self.fingerprint,
                             lambda: adapt(self.config, self.variant, self.model, self.task_of(seed), seed, device))

    def params(self, device: torch.device | str) -> dict:
        """The variant run's MLflow parameters."""
        kind, settings = VARIANT_SPECS[self.variant]
        return {"kind": kind, "device": str(device), "modality": self.modality,
                **{f"fvae.{k}": v for k, v in settings.items()}}


def variant_run(cfg: FvaeLoraConfig, variant: str, split: CleanSplit, text: TextData | None, backbone_path: str,
                backbone_accuracy: float | None, data_version: str, models: Path) -> VariantRun:
    """`variant` (an image variant, or `text_<variant>`) ready to train its seeds: the model loaded
    (under the init lock), the tasks and the records' fingerprint; `models` the method's folder."""
    if variant.startswith(TEXT_PREFIX):
        from paperline.methods.fvae_lora.text import LMFeatures, text_task
        from paperline.train.lm_base import load_causal_lm

        t = cfg.text
        if t is None or text is None:
            raise ValueError(f"{variant}: a text variant without the config's text block")
        own = variant[len(TEXT_PREFIX):]
        lm = LMFeatures(load_causal_lm(t.base))  # loaded under the init lock (paperline.seeds)

        def text_of(seed: int) -> SpuriousTask:
            return text_task(text.tokens, text.y, text.spurious_token, t.agreement, t.train_fraction, seed)
        return VariantRun(cfg.text_config(), own, "text", lm, models / "text",
                          json_digest([t.model_dump(exclude={"variants", "seeds"}), cfg.seed, own, text.version]),
                          text_of)
    # building the model draws from the global RNG (its init, then the saved weights): fenced, or it
    # consumes draws of another variant's seeded init running in a sibling thread
    with seeded_init():
        backbone = load_backbone(backbone_path)

    def image_of(seed: int) -> SpuriousTask:
        return spurious_task(split, cfg.task, seed)
    return VariantRun(cfg, variant, "image", backbone, models,
                      json_digest([cfg.model_dump(exclude={"variants", "seeds", "text"}), variant, data_version,
                                   backbone_accuracy]),
                      image_of)
