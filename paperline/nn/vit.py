"""A small vision transformer in plain torch (no timm, no torchvision), read top to bottom:
patches → linear embedding + [CLS] + learned positions → pre-norm transformer blocks → final norm
→ linear head. `features` is the penultimate representation (the normed [CLS] token) that
CodeMerge fingerprints; `save_classifier` / `load_classifier` write and read a checkpoint that
names its own shape, and a checkpoint that does not fit the model fails naming the file and keys.
Shared by CodeMerge and HRM-PET; built from `ViTShape` (paperline.data.vit_source).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from paperline.io import DataError, atomic_path


class CheckpointMismatchError(DataError):
    """A checkpoint whose tensors do not fit the model; the message names the file and the keys."""


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim {dim} is not a multiple of heads {heads}")
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v)  # no mask: every patch sees every patch
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_ratio: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(), nn.Linear(mlp_ratio * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    def __init__(self, image_size: int = 8, patch_size: int = 2, channels: int = 1, dim: int = 32,
                 depth: int = 2, heads: int = 2, mlp_ratio: int = 2, num_classes: int = 10):
        super().__init__()
        if image_size % patch_size:
            raise ValueError(f"image_size {image_size} is not a multiple of patch_size {patch_size}")
        self.shape = dict(image_size=image_size, patch_size=patch_size, channels=channels, dim=dim,
                          depth=depth, heads=heads, mlp_ratio=mlp_ratio, num_classes=num_classes)
        self.patch_size, self.channels, self.image_size = patch_size, channels, image_size
        n_patches = (image_size // patch_size) ** 2
        self.embed = nn.Linear(channels * patch_size * patch_size, dim)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(0.02 * torch.randn(1, n_patches + 1, dim))
        self.blocks = nn.ModuleList(Block(dim, heads, mlp_ratio) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    @classmethod
    def from_config(cls, shape: Any) -> "ViT":
        """From a ViTShape (or any object with `model_dump()`, or a dict of the constructor's keys)."""
        return cls(**(shape.model_dump() if hasattr(shape, "model_dump") else dict(shape)))

    def patches(self, images: torch.Tensor) -> torch.Tensor:
        """(B, H, W) or (B, C, H, W) → (B, patches, C·p·p)."""
        given = tuple(images.shape)
        if images.dim() == 3:
            images = images.unsqueeze(1)
        if images.dim() != 4 or tuple(images.shape[1:]) != (self.channels, self.image_size, self.image_size):
            raise ValueError(f"expected images (B, {self.channels}, {self.image_size}, {self.image_size}) "
                             f"or (B, {self.image_size}, {self.image_size}), got {given}")
        p = self.patch_size
        x = F.unfold(images, kernel_size=p, stride=p)  # (B, C·p·p, patches)
        return x.transpose(1, 2)

    def features(self, images: torch.Tensor) -> torch.Tensor:
        """The penultimate representation: the normed [CLS] token, (B, dim)."""
        x = self.embed(self.patches(images))
        x = torch.cat([self.cls.expand(len(x), -1, -1), x], dim=1) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.norm(x[:, 0])

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(images))


def save_classifier(path: str | os.PathLike, model: ViT, **extra: Any) -> None:
    """The weights with the shape that rebuilds them (and `extra`, e.g. the training record)."""
    with atomic_path(path) as tmp:
        torch.save({"shape": model.shape, "state_dict": model.state_dict(), **extra}, tmp)


def load_state(model: nn.Module, state_dict: dict[str, torch.Tensor], where: str) -> nn.Module:
    """`model.load_state_dict(state_dict)` whose failure names `where` and every misfit key."""
    own = model.state_dict()
    missing = sorted(set(own) - set(state_dict))
    unexpected = sorted(set(state_dict) - set(own))
    misshapen = [f"{k}: {tuple(state_dict[k].shape)} in the checkpoint, {tuple(v.shape)} in the model"
                 for k, v in own.items() if k in state_dict and tuple(state_dict[k].shape) != tuple(v.shape)]
    if missing or unexpected or misshapen:
        parts = ([f"missing keys {missing[:5]}"] if missing else []) + \
                ([f"unexpected keys {unexpected[:5]}"] if unexpected else []) + misshapen[:5]
        raise CheckpointMismatchError(f"{where}: the checkpoint does not fit the model: " + "; ".join(parts))
    model.load_state_dict(state_dict)
    return model


def load_classifier(path: str | os.PathLike, shape: Any | None = None) -> ViT:
    """The ViT saved at `path`, built from `shape` when given (else from the shape the file names).
    A file that is not a checkpoint, or whose tensors do not fit, raises CheckpointMismatchError."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such classifier checkpoint")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 — any unreadable file is reported the same way
        raise CheckpointMismatchError(f"{path}: not a readable torch checkpoint ({err})") from err
    if not isinstance(ckpt, dict):
        raise CheckpointMismatchError(f"{path}: expected a dict checkpoint, got {type(ckpt).__name__}")
    state = ckpt.get("state_dict", ckpt)  # a bare state_dict is accepted too
    if shape is None and "shape" not in ckpt:
        raise CheckpointMismatchError(f"{path}: a bare state_dict names no shape; give the ViT shape")
    try:
        model = ViT.from_config(shape if shape is not None else ckpt["shape"])
    except TypeError as err:
        raise CheckpointMismatchError(f"{path}: its shape {ckpt.get('shape')} is not a ViT's ({err})") from err
    return load_state(model, state, str(path))
