"""The models QFFT fine-tunes: our char-level CausalLM (smoke) or any `transformers` causal LM
loaded from a local directory (paper: Qwen2.5-7B-Instruct), behind the one interface
`paperline.train.lm.train_lm` uses (targets already shifted, -100 ignored)."""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from paperline.nn.causal_lm import CausalLM, CausalLMOutput


class ShiftedTargetsLM(nn.Module):
    """A transformers causal LM taking targets already shifted by one (as CausalLM does): HF
    models shift `labels` themselves, so the loss is computed here from the logits."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.config = model.config

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None, **kwargs) -> CausalLMOutput:
        logits = self.model(input_ids, **kwargs).logits
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
        return CausalLMOutput(loss=loss, logits=logits)


def load_causal_lm(path: str | Path):
    """A saved model directory: ours (model type paperline_causal_lm) as CausalLM, anything else
    through AutoModelForCausalLM (local files only: no hub downloads)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(path, local_files_only=True)
    if config.model_type == CausalLM.config_class.model_type:
        return CausalLM.from_pretrained(path)
    return AutoModelForCausalLM.from_pretrained(path, local_files_only=True, torch_dtype="auto")


def trainable(model):
    """What train_lm trains: CausalLM as it is, an HF model wrapped for shifted targets."""
    return model if isinstance(model, CausalLM) else ShiftedTargetsLM(model)


def unwrap(model):
    return model.model if isinstance(model, ShiftedTargetsLM) else model
