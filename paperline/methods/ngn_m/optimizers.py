"""The optimizers of the sweep by name, each built from the one step-size hyperparameter c.

Baselines are torch's own: SGD (lr = c), SGD with heavy-ball momentum (torch's undampened form
v ← βv + g, x ← x − c·v, as the paper's SGDM baseline) and Adam (lr = c).
"""
from __future__ import annotations

import math

import torch

from paperline.optim.ngn import NGN, NGNM
from paperline.optim.ngn_md import NGNMD

NGN_FAMILY = ("ngn", "ngn_m", "ngn_md")
TITLES = {"sgd": "SGD", "sgdm": "SGDM", "adam": "Adam", "ngn": "NGN", "ngn_m": "NGN-M", "ngn_md": "NGN-MD"}


def make_optimizer(name: str, params, c: float, *, momentum: float = 0.9,
                   betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                   weight_decay: float = 0.0) -> torch.optim.Optimizer:
    if not (isinstance(c, (int, float)) and math.isfinite(c) and c > 0):
        # torch's SGD accepts lr = 0 and would train nothing: refuse it for every optimizer alike
        raise ValueError(f"{name}: the step size c (the learning rate) must be a finite number > 0 (got {c!r})")
    if name == "sgd":
        return torch.optim.SGD(params, lr=c, weight_decay=weight_decay)
    if name == "sgdm":
        return torch.optim.SGD(params, lr=c, momentum=momentum, weight_decay=weight_decay)
    if name == "adam":
        return torch.optim.Adam(params, lr=c, betas=betas, eps=eps, weight_decay=weight_decay)
    if name == "ngn":
        return NGN(params, c=c, weight_decay=weight_decay)
    if name == "ngn_m":
        return NGNM(params, c=c, momentum=momentum, weight_decay=weight_decay)
    if name == "ngn_md":
        return NGNMD(params, c=c, betas=betas, eps=eps, weight_decay=weight_decay)
    raise ValueError(f"unknown optimizer {name!r}; known: {', '.join(TITLES)}")
