"""The models QFFT fine-tunes: our char-level CausalLM (smoke) or any `transformers` causal LM
loaded from a local directory (paper: Qwen2.5-7B-Instruct), behind the one interface
`paperline.train.lm.train_lm` uses (targets already shifted, -100 ignored)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from paperline.nn.causal_lm import CausalLM, CausalLMOutput
from paperline.seeds import seeded_init


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


def trainable(model):
    """What train_lm trains: CausalLM as it is (or under peft adapters), an HF model wrapped for
    shifted targets."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    return model if isinstance(inner, CausalLM) else ShiftedTargetsLM(model)


def unwrap(model):
    return model.model if isinstance(model, ShiftedTargetsLM) else model


def add_lora(model, lora, seed: int = 0):
    """peft's LoRA (`LoraConfig` + `get_peft_model`) on the linear layers named `lora.target_modules`,
    every base weight frozen: only the adapters train, so the base's own behaviour is kept in the
    frozen weights (B starts at zero: the adapted model starts as the base). A target that names no
    linear layer is an error naming the key and the model's linear layer names."""
    from peft import LoraConfig, get_peft_model

    linear = {name for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    for target in lora.target_modules:
        if not any(n == target or n.endswith(f".{target}") for n in linear):
            names = sorted({n.rsplit(".", 1)[-1] for n in linear})
            raise ValueError(f"finetune.lora.target_modules: {target!r} matches no linear layer of the model "
                             f"(its linear layers are named {', '.join(names)})")
    model.requires_grad_(False)
    with seeded_init(seed):  # peft draws A from the global RNG: seeded, left as it was
        return get_peft_model(model, LoraConfig(r=lora.rank, lora_alpha=lora.alpha,
                                                target_modules=list(lora.target_modules),
                                                lora_dropout=lora.dropout, bias="none"))


def merged(model):
    """The plain model to save and decode: a peft model's adapters merged into its weights."""
    from peft import PeftModel

    return model.merge_and_unload() if isinstance(model, PeftModel) else model
