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
from typing import Any, TypeVar

import torch
import torch.nn.functional as F
from torch import nn

from paperline.io import DataError, atomic_path

ModuleT = TypeVar("ModuleT", bound=nn.Module)

# nn.LayerNorm's default; a checkpoint records its eps only where it differs (converted ViT-B/16:
# 1e-12), so the shapes saved before eps was a parameter keep loading
NORM_EPS = 1e-5


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
    def __init__(self, dim: int, heads: int, mlp_ratio: int, norm_eps: float = NORM_EPS):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=norm_eps)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=norm_eps)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(), nn.Linear(mlp_ratio * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    def __init__(self, image_size: int = 8, patch_size: int = 2, channels: int = 1, dim: int = 32,
                 depth: int = 2, heads: int = 2, mlp_ratio: int = 2, num_classes: int = 10,
                 norm_eps: float = NORM_EPS):
        super().__init__()
        if image_size % patch_size:
            raise ValueError(f"image_size {image_size} is not a multiple of patch_size {patch_size}")
        self.shape: dict[str, Any] = dict(image_size=image_size, patch_size=patch_size, channels=channels, dim=dim,
                          depth=depth, heads=heads, mlp_ratio=mlp_ratio, num_classes=num_classes)
        if norm_eps != NORM_EPS:
            self.shape["norm_eps"] = norm_eps
        self.patch_size, self.channels, self.image_size = patch_size, channels, image_size
        n_patches = (image_size // patch_size) ** 2
        self.embed = nn.Linear(channels * patch_size * patch_size, dim)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(0.02 * torch.randn(1, n_patches + 1, dim))
        self.blocks = nn.ModuleList(Block(dim, heads, mlp_ratio, norm_eps) for _ in range(depth))
        self.norm = nn.LayerNorm(dim, eps=norm_eps)
        self.head = nn.Linear(dim, num_classes)

    @classmethod
    def from_config(cls, shape: Any) -> "ViT":
        """From a ViTShape (or any object with `model_dump()`, or a dict of the constructor's keys)."""
        return cls(**(shape.model_dump() if hasattr(shape, "model_dump") else dict(shape)))

    def patches(self, images: torch.Tensor) -> torch.Tensor:
        """(B, H, W) or (B, C, H, W) → (B, patches, C·p·p). A grey (B, H, W) batch is repeated over
        the channels of a colour backbone (MNIST on a converted ViT-B/16)."""
        given = tuple(images.shape)
        if images.dim() == 3:
            images = images.unsqueeze(1).expand(-1, self.channels, -1, -1)
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


def load_state(model: ModuleT, state_dict: dict[str, torch.Tensor], where: str) -> ModuleT:
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
    if shape is not None:  # the weights' LayerNorm eps is theirs (1e-12 for a converted ViT-B/16)
        shape = (shape.model_dump() if hasattr(shape, "model_dump") else dict(shape)) | \
            {k: v for k, v in (ckpt.get("shape") or {}).items() if k == "norm_eps"}
    try:
        model = ViT.from_config(shape if shape is not None else ckpt["shape"])
    except TypeError as err:
        raise CheckpointMismatchError(f"{path}: its shape {ckpt.get('shape')} is not a ViT's ({err})") from err
    return load_state(model, state, str(path))


def vit_from_transformers(model: Any) -> ViT:
    """This ViT holding the weights of a transformers `ViTForImageClassification` (ViT-B/16 and the
    like). The layouts map one to one: the patch convolution is the linear embedding of unfolded
    patches (the same C·p·p order), query, key and value stack into qkv, and LayerNorm keeps the
    source's eps. Read from the model's own state dict, so transformers' key renaming of older
    checkpoints applies first."""
    cfg = model.config
    if getattr(cfg, "hidden_act", "gelu") != "gelu" or not getattr(cfg, "qkv_bias", True):
        raise ValueError(f"a ViT with hidden_act {cfg.hidden_act!r} and qkv_bias {cfg.qkv_bias} has no "
                         "counterpart here (GELU and biased qkv only)")
    if cfg.intermediate_size % cfg.hidden_size:
        raise ValueError(f"intermediate_size {cfg.intermediate_size} is not a multiple of hidden_size {cfg.hidden_size}")
    theirs = model.state_dict()
    ours = ViT(image_size=cfg.image_size, patch_size=cfg.patch_size, channels=cfg.num_channels,
               dim=cfg.hidden_size, depth=cfg.num_hidden_layers, heads=cfg.num_attention_heads,
               mlp_ratio=cfg.intermediate_size // cfg.hidden_size, num_classes=theirs["classifier.weight"].shape[0],
               norm_eps=cfg.layer_norm_eps)
    state = {"embed.weight": theirs["vit.embeddings.patch_embeddings.projection.weight"].reshape(cfg.hidden_size, -1),
             "embed.bias": theirs["vit.embeddings.patch_embeddings.projection.bias"],
             "cls": theirs["vit.embeddings.cls_token"], "pos": theirs["vit.embeddings.position_embeddings"],
             "norm.weight": theirs["vit.layernorm.weight"], "norm.bias": theirs["vit.layernorm.bias"],
             "head.weight": theirs["classifier.weight"], "head.bias": theirs["classifier.bias"]}
    for i in range(cfg.num_hidden_layers):
        src, dst = f"vit.layers.{i}.", f"blocks.{i}."
        for kind in ("weight", "bias"):
            state[dst + f"attn.qkv.{kind}"] = torch.cat([theirs[src + f"attention.{n}_proj.{kind}"] for n in "qkv"])
            for ours_name, their_name in (("norm1", "layernorm_before"), ("attn.proj", "attention.o_proj"),
                                          ("norm2", "layernorm_after"), ("mlp.0", "mlp.fc1"), ("mlp.2", "mlp.fc2")):
                state[dst + f"{ours_name}.{kind}"] = theirs[src + f"{their_name}.{kind}"]
    return load_state(ours, state, f"transformers {type(model).__name__}")


def convert_transformers_checkpoint(source: str | os.PathLike, out: str | os.PathLike) -> Path:
    """A local transformers ViT image classifier folder (config.json + weights; nothing is
    downloaded) written as this module's checkpoint, which the `paper` profiles load by path."""
    from transformers import ViTForImageClassification

    from paperline.seeds import load_pretrained

    source = Path(source)
    if not (source / "config.json").is_file():
        raise FileNotFoundError(f"{source}: not a transformers model folder (no config.json)")
    model = load_pretrained(ViTForImageClassification, source, local_files_only=True)
    save_classifier(out, vit_from_transformers(model.eval()), converted_from=str(source))
    return Path(out)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="python -m paperline.nn.vit",
                                     description="convert a local transformers ViT classifier (e.g. ViT-B/16) "
                                                 "into this module's checkpoint")
    parser.add_argument("source", help="the transformers model folder")
    parser.add_argument("out", help="the checkpoint to write (.pt)")
    args = parser.parse_args()
    print(convert_transformers_checkpoint(args.source, args.out))
