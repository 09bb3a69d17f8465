"""The models of HRM-PET on the frozen backbone: a task-specific LoRA per task on the qkv
projection of the first blocks (peft's LoRA layers injected into paperline.nn.vit.ViT, one named
adapter per task; by default k and v only, as the official `HideLoraPool`), the unified
classifier, the TII head, and the Gaussian class statistics both heads are aligned with."""
from __future__ import annotations

import copy
import warnings
from typing import cast

import torch
from torch import nn

from paperline.nn.vit import ViT


def adapter_name(task: int) -> str:
    return f"task{task}"


def adapter_weight(factors: nn.ModuleDict, task: int) -> torch.Tensor:
    """Task `task`'s weight in a LoRA layer's lora_A or lora_B (peft keeps an nn.Linear per adapter;
    nn.ModuleDict's stub types its items as any Module)."""
    return cast(nn.Linear, factors[adapter_name(task)]).weight


class LoraViT(nn.Module):
    """The frozen ViT (its head dropped) with one LoRA adapter per task on the `qkv` projection of
    the first min(`depth`, blocks) blocks (all when None), scaling alpha/r, B initialized to zero by
    peft, and the unified linear classifier over all classes. `targets` "kv" (the official
    `HideLoraPool`): k and v each get their own rank-r factors and q none, as one rank-2r peft
    adapter whose B is held block-diagonal (its other entries start at zero and their gradient is
    masked); "qkv": one rank-r adapter on the whole qkv output.
    `features(x, task)` runs the backbone with task `task`'s LoRA; `features(x, None)` without any
    (the frozen features the TII head reads)."""

    def __init__(self, backbone: ViT, tasks: int, num_classes: int, rank: int, alpha: float,
                 targets: str = "kv", depth: int | None = None):
        super().__init__()
        from peft import LoraConfig, inject_adapter_in_model
        from peft.tuners.lora import LoraLayer

        vit = copy.deepcopy(backbone)
        vit.head = nn.Identity()  # type: ignore[assignment]  # the features: the heads are this model's own
        for p in vit.parameters():
            p.requires_grad_(False)
        blocks = len(vit.blocks) if depth is None else min(depth, len(vit.blocks))
        modules = [f"blocks.{i}.attn.qkv" for i in range(blocks)]
        parts = 2 if targets == "kv" else 1  # rank-r factors per adapter
        with warnings.catch_warnings():  # peft warns on every adapter after the first: that is the design
            warnings.simplefilter("ignore")
            for t in range(tasks):
                # peft annotates lora_alpha as an int; it scales by lora_alpha / r, a float works.
                # inject_adapter_in_model returns the model it was given (typed as any Module)
                vit = cast(ViT, inject_adapter_in_model(
                    LoraConfig(r=parts * rank, lora_alpha=parts * alpha,  # type: ignore[arg-type]
                               target_modules=modules, lora_dropout=0.0),
                    vit, adapter_name=adapter_name(t)))
        self.vit, self.tasks = vit, tasks
        self.lora_layers = [m for m in vit.modules() if isinstance(m, LoraLayer)]
        if targets == "kv":
            mask = b_mask("qkv", targets, backbone.shape["dim"], rank)
            for layer in self.lora_layers:
                for t in range(tasks):
                    w = adapter_weight(layer.lora_B, t)
                    with torch.no_grad():
                        w.mul_(mask)  # a no-op on peft's zeros
                    w.register_hook(lambda g: g * mask)
        self.head = nn.Linear(backbone.shape["dim"], num_classes)
        self._active: int | None = -1
        self.use(0)

    def use(self, task: int | None) -> None:
        """Make task `task`'s adapter the active one (None: run the frozen backbone alone)."""
        if task == self._active:
            return
        for layer in self.lora_layers:
            if task is None:
                layer.enable_adapters(False)  # the frozen features
            else:
                layer.enable_adapters(True)
                layer.set_adapter(adapter_name(task))
        self._active = task

    def lora_parameters(self, task: int) -> list[nn.Parameter]:
        name = adapter_name(task)
        return [p for layer in self.lora_layers for d in (layer.lora_A, layer.lora_B) for p in d[name].parameters()]

    def train_only(self, task: int) -> list[nn.Parameter]:
        """Freeze everything but task `task`'s LoRA and the head; returns those parameters."""
        for p in self.parameters():
            p.requires_grad_(False)
        params = self.lora_parameters(task) + list(self.head.parameters())
        for p in params:
            p.requires_grad_(True)
        return params

    @torch.no_grad()
    def copy_adapter(self, source: int, task: int) -> None:
        """Task `task`'s LoRA set to a copy of task `source`'s (the official start of a new task)."""
        for layer in self.lora_layers:
            for d in (layer.lora_A, layer.lora_B):
                adapter_weight(d, task).copy_(adapter_weight(d, source))

    @torch.no_grad()
    def mix_with_old(self, task: int, momentum: float) -> None:
        """HiDe's LoRA momentum: adapter_t ← (1 − m)·adapter_t + m·mean(adapters < t). The official
        code applies it after training (to a start copied from t − 1); timing "before" applies it to
        the fresh initialization, as HiDe-Prompt does to prompts [I]."""
        if task == 0 or momentum == 0:
            return
        for layer in self.lora_layers:
            for d in (layer.lora_A, layer.lora_B):
                old = torch.stack([adapter_weight(d, s) for s in range(task)]).mean(0)
                adapter_weight(d, task).mul_(1 - momentum).add_(momentum * old)

    def features(self, images: torch.Tensor, task: int | None) -> torch.Tensor:
        self.use(task)
        return self.vit.features(images)

    def routed_features(self, images: torch.Tensor, tasks: torch.Tensor) -> torch.Tensor:
        """Each sample through its own task's LoRA (one pass per task present: the same work as a
        per-sample pass)."""
        out = torch.empty(len(images), self.head.in_features)
        for t in tasks.unique().tolist():
            idx = (tasks == t).nonzero().squeeze(1)
            out[idx] = self.features(images[idx], t)
        return out


def b_mask(outputs: str, targets: str, dim: int, rank: int) -> torch.Tensor:
    """(len(outputs)·dim, len(targets)·rank) 0/1: target j's dim output rows read only columns
    j·r..(j+1)·r of A, so each target has its own rank-r LoRA and the other outputs none."""
    mask = torch.zeros(len(outputs) * dim, len(targets) * rank)
    for j, name in enumerate(targets):
        o = outputs.index(name)
        mask[o * dim:(o + 1) * dim, j * rank:(j + 1) * rank] = 1.0
    return mask


class TiiHead(nn.Module):
    """The task-identity-inference head: an MLP over all classes on the frozen features."""

    def __init__(self, dim: int, num_classes: int, hidden_ratio: int = 2):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, hidden_ratio * dim), nn.GELU(), nn.Linear(hidden_ratio * dim, num_classes))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.net(features)


class ClassStats:
    """Per-class Gaussian statistics of features (mean, covariance + eps·I, its Cholesky factor):
    the replay that stands in for old classes' data (HiDe's `covariance` storage)."""

    def __init__(self, dim: int, eps: float):
        self.dim, self.eps = dim, eps
        self.mean: dict[int, torch.Tensor] = {}
        self.cov: dict[int, torch.Tensor] = {}

    def add(self, features: torch.Tensor, labels: torch.Tensor) -> None:
        for c in labels.unique().tolist():
            f = features[labels == c].double()
            mu = f.mean(0)
            centred = f - mu
            cov = centred.T @ centred / max(len(f) - 1, 1)
            self.mean[c] = mu.float()
            self.cov[c] = (cov + self.eps * torch.eye(self.dim, dtype=torch.float64)).float()

    def sample(self, per_class: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """`per_class` draws μ_c + L_c z (z standard normal, L_c L_cᵀ = Σ_c) for every stored class."""
        xs, ys = [], []
        for c in sorted(self.mean):
            z = torch.randn(per_class, self.dim, generator=generator)
            xs.append(self.mean[c] + z @ torch.linalg.cholesky(self.cov[c]).T)
            ys.append(torch.full((per_class,), c, dtype=torch.long))
        return torch.cat(xs), torch.cat(ys)

    def state_dict(self) -> dict:
        return {"mean": self.mean, "cov": self.cov}

    def load_state_dict(self, state: dict) -> None:
        self.mean, self.cov = dict(state["mean"]), dict(state["cov"])
