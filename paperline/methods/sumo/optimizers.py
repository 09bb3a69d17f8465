"""The compared optimizers, built for a model by name, and the spec's state-size formulas.

    adamw         torch.optim.AdamW on every parameter (the baseline; torch's own)
    galore_adamw  GaLore-AdamW on the matrices, AdamW on the rest
    muon          Muon (NS5, full rank) on the matrices, AdamW on the rest
    sumo          SUMO (exact SVD) on the matrices, AdamW on the rest
    sumo_ns       SUMO with Muon's NS5 inside the subspace: the ablation of the exact SVD (spec pitfall)
"""
from __future__ import annotations

import torch

from paperline.methods.sumo.config import SumoConfig
from paperline.methods.sumo.mlp import MLP
from paperline.nn.causal_lm import CausalLM
from paperline.optim.galore import GaLoreAdamW
from paperline.optim.muon import Muon
from paperline.optim.sumo import SUMO

LABELS = {"adamw": "AdamW", "galore_adamw": "GaLore-AdamW", "muon": "Muon (NS5)", "sumo": "SUMO (SVD)",
          "sumo_ns": "SUMO with NS5"}


def build_optimizer(name: str, model: MLP | CausalLM, lr: float, cfg: SumoConfig, seed: int = 0) -> torch.optim.Optimizer:
    """`model` tells its matrices (matrix_parameters) from the rest (other_parameters)."""
    if name == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=cfg.weight_decay)
    groups = [{"params": model.matrix_parameters()},
              {"params": model.other_parameters(), "adamw": True,
               "lr": cfg.adamw_part_lr if cfg.adamw_part_lr is not None else lr}]
    if name == "galore_adamw":
        return GaLoreAdamW(groups, lr=lr, rank=cfg.rank, update_period=cfg.update_period, alpha=cfg.alpha,
                           weight_decay=cfg.weight_decay)
    if name == "muon":
        return Muon(groups, lr=lr, momentum=cfg.muon_momentum, weight_decay=cfg.weight_decay)
    if name in ("sumo", "sumo_ns"):
        return SUMO(groups, lr=lr, rank=cfg.rank, update_period=cfg.update_period, alpha=cfg.alpha,
                    momentum=cfg.sumo_momentum, limiter=cfg.limiter, weight_decay=cfg.weight_decay,
                    orthogonalization="svd" if name == "sumo" else "newton_schulz", seed=seed)
    raise ValueError(f"unknown optimizer {name!r}; known: {', '.join(LABELS)}")


def matrix_state_formula(name: str, shape: tuple[int, int], rank: int) -> int:
    """Optimizer-state floats of one m×n matrix by the spec's formulas (§b step 8), written for the
    projected side s = min(m, n) and the other side l = max(m, n) (the spec's m ≤ n case)."""
    m, n = shape
    s, l = min(m, n), max(m, n)
    return {"adamw": 2 * m * n, "muon": m * n, "galore_adamw": 2 * l * rank + s * rank,
            "sumo": l * rank + s * rank, "sumo_ns": l * rank + s * rank}[name]


def state_formula(name: str, model: MLP | CausalLM, rank: int) -> int:
    """Floats of the whole optimizer state: the formula for each matrix, 2 per entry (AdamW) for the rest."""
    if name == "adamw":
        return sum(2 * p.numel() for p in model.parameters())
    return (sum(matrix_state_formula(name, tuple(p.shape), rank) for p in model.matrix_parameters())
            + sum(2 * p.numel() for p in model.other_parameters()))
