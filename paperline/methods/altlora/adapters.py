"""LoRA through peft (`LoraConfig` + `get_peft_model`, by `target_modules`) on a plain torch module or
the shared causal LM, the checks that fail before training, and each compared optimizer built on it."""
from __future__ import annotations

import torch
from torch import nn

from paperline.methods.altlora.config import OptimizerName, OptimizerSettings
from paperline.optim.altlora import STATE_FLOATS, AltLoRA, LoRAProLike, lora_pairs, scaled_gd, state_floats_formula

LORA_OPTIMIZERS = ("lora_adamw", "lora_sgdm", "scaledgd", "altlora", "altlora_plus", "lora_pro")


class AdapterError(ValueError):
    """A target module or rank that does not fit the model; the message names the key."""


def check_targets(model: nn.Module, target_modules: list[str], rank: int, where: str = "target_modules") -> None:
    """Every target names at least one nn.Linear (peft's rule: the module name or its last
    dotted part), and the rank fits each matched layer's narrower side."""
    layers = {name: m for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    for target in target_modules:
        matched = {n: m for n, m in layers.items() if n == target or n.endswith(f".{target}")}
        if not matched:
            names = sorted({n.rsplit(".", 1)[-1] for n in layers})
            raise AdapterError(f"{where}: {target!r} matches no linear layer of the model "
                               f"(its linear layers are named {', '.join(names)})")
        for name, layer in matched.items():
            width = min(layer.in_features, layer.out_features)
            if rank > width:
                raise AdapterError(f"rank {rank} is above the width of layer {name} "
                                   f"({layer.out_features}×{layer.in_features}: at most {width})")


def add_lora(model: nn.Module, target_modules: list[str], rank: int, alpha: float, dropout: float = 0.0,
             where: str = "target_modules") -> nn.Module:
    """peft's LoRA on `target_modules` (A Kaiming-uniform, B = 0, s = α/r); the base frozen."""
    from peft import LoraConfig, get_peft_model

    check_targets(model, target_modules, rank, where)
    # peft annotates lora_alpha as an int; it scales by lora_alpha / r, a float works
    return get_peft_model(model, LoraConfig(r=rank, lora_alpha=alpha,  # type: ignore[arg-type]
                                            target_modules=list(target_modules), lora_dropout=dropout, bias="none"))


@torch.no_grad()
def rescale(model: nn.Module, c: float) -> None:
    """The reparameterisation (A, B) → (A·c, B/c): the same adapted weight s·B·A."""
    for pair in lora_pairs(model):
        pair.A.mul_(c)
        pair.B.div_(c)


def trainable(model: nn.Module) -> list[nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def make_optimizer(name: OptimizerName, model: nn.Module, lr: float, s: OptimizerSettings,
                   data_parallel: bool = False) -> torch.optim.Optimizer:
    """`model`: the peft model (LoRA optimizers), or the plain model with every weight trainable
    (full_ft). `data_parallel`: the model is about to be wrapped by DDP (AltLoRA's alternation
    then zeroes the frozen factor's gradient instead of switching its requires_grad)."""
    if name == "full_ft":
        return torch.optim.AdamW(trainable(model), lr=lr, betas=s.betas, eps=s.adam_eps, weight_decay=s.weight_decay)
    if name == "lora_adamw":
        return torch.optim.AdamW(trainable(model), lr=lr, betas=s.betas, eps=s.adam_eps, weight_decay=s.weight_decay)
    if name == "lora_sgdm":
        return torch.optim.SGD(trainable(model), lr=lr, momentum=s.sgd_momentum, weight_decay=s.weight_decay)
    pairs = lora_pairs(model)
    if name == "scaledgd":
        return scaled_gd(pairs, lr=lr, weight_decay=s.weight_decay, reg=s.reg)
    if name in ("altlora", "altlora_plus"):
        return AltLoRA(pairs, lr=lr, betas=s.betas, eps=s.altlora_eps, weight_decay=s.weight_decay, reg=s.reg,
                       second_moment=name == "altlora_plus", alter_freq=s.alter_freq, zero_frozen=data_parallel)
    if name == "lora_pro":
        return LoRAProLike(pairs, lr=lr, betas=s.betas, eps=s.adam_eps, weight_decay=s.weight_decay, reg=s.reg)
    raise ValueError(f"unknown optimizer {name!r}")


def expected_state_floats(name: OptimizerName, model: nn.Module) -> int:
    """The spec's count: per adapted k×d layer at rank r (STATE_FLOATS); full fine-tuning with
    AdamW holds two floats per trained weight."""
    if name == "full_ft":
        return 2 * sum(p.numel() for p in trainable(model))
    return state_floats_formula(name, lora_pairs(model))


__all__ = ["LORA_OPTIMIZERS", "STATE_FLOATS", "AdapterError", "add_lora", "check_targets", "expected_state_floats",
           "make_optimizer", "rescale", "trainable"]


class OptimizerFactory:
    """`make_optimizer` as the shared loop's `optimizer_factory` (paperline/train/lm.py): a plain
    object, not a closure, so that a training spread over processes (`train_lm_spread`) pickles it
    and builds the optimizer in each process on that process's copy of the model. It seeds the
    global RNG first, which LoRA dropout draws from: `seed` in one process (what the caller seeded
    before), `seed + rank` in each of several (each draws its own masks for its rows)."""

    def __init__(self, name: OptimizerName, lr: float, settings: OptimizerSettings, seed: int):
        self.name, self.lr, self.settings, self.seed = name, lr, settings, seed

    def __call__(self, model: nn.Module) -> torch.optim.Optimizer:
        import torch.distributed as dist

        spread = dist.is_available() and dist.is_initialized()
        rank, world = (dist.get_rank(), dist.get_world_size()) if spread else (0, 1)
        torch.manual_seed(self.seed + rank)
        return make_optimizer(self.name, model, self.lr, self.settings, data_parallel=world > 1)
