"""The models and their training: the clean backbone (an MLP of two hidden ReLU layers trained on
the clean 10-class images here, or a local paperline ViT classifier by path), frozen; the task
model (its features and a new 2-way head); and one (variant, seed) adaptation: a linear probe
(the head alone), LoRA (peft) or FVAE-LoRA on the backbone's target modules plus the head,
evaluated on the balanced test set (average and worst-group accuracy)."""
from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from paperline.io import atomic_path, one_line
from paperline.methods.fvae_lora.adapter import fvae_loss, inject, set_generator
from paperline.methods.fvae_lora.config import VARIANT_SPECS, BackboneConfig, FvaeLoraConfig
from paperline.methods.fvae_lora.data import CleanSplit, SpuriousTask, group_accuracy
from paperline.nn.mlp import MLP
from paperline.seeds import seeded_init
from paperline.train.classifier import train_classifier


class DigitsMLP(MLP):
    """images (B, H, W) → flatten → fc1 → ReLU → fc2 → ReLU (`features`) → head."""

    def __init__(self, image_size: int, hidden: int, classes: int):
        super().__init__(image_size * image_size, [hidden, hidden], classes, names=("fc1", "fc2", "head"))
        self.shape = {"kind": "mlp", "image_size": image_size, "hidden": hidden, "classes": classes}
        self.image_size = image_size
        self.dim = hidden

    def features(self, images: torch.Tensor) -> torch.Tensor:
        return super().features(images.flatten(1))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return super().forward(images.flatten(1))


def load_backbone(path: str | Path) -> nn.Module:
    """A backbone file: this module's MLP (`save_backbone`) or a paperline.nn.vit classifier
    (`save_classifier`); anything else raises the loader's error naming the path."""
    from paperline.nn.vit import CheckpointMismatchError, load_classifier, load_state

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such backbone model file")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 — any unreadable file is reported the same way
        raise CheckpointMismatchError(f"{path}: not a readable torch checkpoint ({one_line(err)})") from err
    if isinstance(ckpt, dict) and isinstance(ckpt.get("shape"), dict) and ckpt["shape"].get("kind") == "mlp":
        s = ckpt["shape"]
        return load_state(DigitsMLP(s["image_size"], s["hidden"], s["classes"]), ckpt["state_dict"], str(path))
    model = load_classifier(path)
    setattr(model, "dim", model.shape["dim"])  # TaskModel reads a backbone's width as its `dim`
    return model


def save_backbone(path: str | Path, model: DigitsMLP, **extra) -> None:
    with atomic_path(path) as tmp:
        torch.save({"shape": model.shape, "state_dict": model.state_dict(), **extra}, tmp)


def image_size_of(model: nn.Module) -> int:
    shape: dict = getattr(model, "shape")  # DigitsMLP's and a ViT's
    return shape["image_size"]


def train_backbone(split: CleanSplit, cfg: BackboneConfig, seed: int) -> tuple[DigitsMLP, dict]:
    """The MLP trained on the clean training images' classes (Adam, cross-entropy:
    paperline.train.classifier); its record."""
    x, y = torch.from_numpy(split.train_x), torch.from_numpy(split.train_y)
    with seeded_init(seed):
        model = DigitsMLP(x.shape[1], cfg.hidden, split.classes)
    trained = train_classifier(model, x, y, torch.optim.Adam(model.parameters(), lr=cfg.lr),
                               torch.Generator().manual_seed(seed), epochs=cfg.epochs, batch_size=cfg.batch_size)
    with torch.no_grad():
        acc = float((model(torch.from_numpy(split.test_x)).argmax(1).numpy() == split.test_y).mean())
    return model, {"clean_test_accuracy": acc, "train_seconds": trained["train_seconds"]}


class TaskModel(nn.Module):
    """The frozen backbone's features (its own head dropped) and a new 2-way head."""

    def __init__(self, backbone: nn.Module, classes: int = 2):
        super().__init__()
        # DigitsMLP, a ViT or a TextBackbone: duck-typed (dim, features, head)
        self.backbone: Any = copy.deepcopy(backbone)
        self.backbone.head = nn.Identity()
        for p in self.backbone.parameters():
            p.requires_grad_(False)
        self.head = nn.Linear(getattr(backbone, "dim"), classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone.features(images))


def build_model(cfg: FvaeLoraConfig, variant: str, backbone: nn.Module) -> TaskModel:
    """The task model of `variant`: the probe's head alone, or the head and an adapter on
    `adapter.target_modules` (inside the backbone)."""
    kind = VARIANT_SPECS[variant][0]
    model = TaskModel(backbone)
    if kind != "probe":
        a = cfg.adapter
        inject(model.backbone, kind, a.target_modules, a.rank, a.alpha,
               cfg.fvae_settings(variant) if kind == "fvae" else None)
    for p in model.head.parameters():
        p.requires_grad_(True)
    return model


@torch.no_grad()
def predict(model: nn.Module, images: np.ndarray, device: torch.device | str = "cpu",
            batch_size: int = 512) -> np.ndarray:
    model.eval()  # FVAE: μ₁, encoder 2 and the decoder unused
    x = torch.from_numpy(images).to(device)
    return torch.cat([model(x[i:i + batch_size]).argmax(1) for i in range(0, len(x), batch_size)]).cpu().numpy()


def adapt(cfg: FvaeLoraConfig, variant: str, backbone: nn.Module, task: SpuriousTask, seed: int,
          device: torch.device | str = "cpu") -> dict:
    """Train one (variant, seed) and evaluate it: the test figures (group_accuracy), the training
    accuracy, the per-epoch losses and the trainable parameter count (at evaluation: the FVAE
    encoder 1 and B only are needed; `inference_parameters`)."""
    g = torch.Generator().manual_seed(seed)
    kind = VARIANT_SPECS[variant][0]
    with seeded_init(seed):  # the head's, peft's and the adapters' init draw from the global RNG
        model = build_model(cfg, variant, backbone).to(device)
    if kind == "fvae":  # ε and the dropout masks from a stream of the run's own
        noise = torch.Generator(device=device)
        noise.manual_seed(seed + 1)
        set_generator(model, noise)
    params = [p for p in model.parameters() if p.requires_grad]
    lambda_down = cfg.fvae.lambda_down if kind == "fvae" else 1.0
    opt = torch.optim.Adam(params, lr=cfg.train.lr)
    x, y = torch.from_numpy(task.train_x).to(device), torch.from_numpy(task.train_y).to(device)
    history: dict[str, list[float]] = {"ce": [], "fvae": [], "rec": [], "kl": [], "z1": [], "z2": []}
    start = time.perf_counter()
    for _ in range(cfg.train.epochs):
        model.train()
        sums, batches = dict.fromkeys(history, 0.0), 0
        for idx in torch.randperm(len(x), generator=g).to(device).split(cfg.train.batch_size):
            opt.zero_grad()
            ce = F.cross_entropy(model(x[idx]), y[idx])
            loss = lambda_down * ce
            sums["ce"] += float(ce.detach())
            if kind == "fvae":
                terms = fvae_loss(model)
                loss = loss + terms["loss"]
                sums["fvae"] += float(terms["loss"].detach())
                for k in ("rec", "kl", "z1", "z2"):
                    sums[k] += float(terms[k].detach())
            loss.backward()
            opt.step()
            batches += 1
        for k in history:
            history[k].append(sums[k] / batches)
    seconds = time.perf_counter() - start
    result = group_accuracy(predict(model, task.test_x, device), task.test_y, task.test_a)
    result["train_accuracy"] = float((predict(model, task.train_x, device) == task.train_y).mean())
    result["train_seconds"] = seconds
    result["trainable_parameters"] = sum(p.numel() for p in params)
    result["inference_parameters"] = sum(p.numel() for n, p in model.named_parameters()
                                         if p.requires_grad and "lora_encoder2" not in n and "lora_decoder" not in n)
    return {"metrics": result, "history": {k: v for k, v in history.items() if kind == "fvae" or k == "ce"}}
