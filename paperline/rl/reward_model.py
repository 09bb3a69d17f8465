"""The preference reward model of PEBBLE (Lee et al. 2021) and its successors: an ensemble of MLPs
r̂(s, a) ∈ [−1, 1] (tanh outputs) trained with the Bradley–Terry loss on segment pairs,

    P[σ⁰ ≻ σ¹] = exp Σ_t r̂(s⁰_t, a⁰_t) / (exp Σ_t r̂(s⁰_t, a⁰_t) + exp Σ_t r̂(s¹_t, a¹_t)),

cross-entropy against a target y = P[σ⁰ ≻ σ¹] ∈ {1, 0, ½}. STAR's preference margin
regularisation (PMR) smooths the hard targets to (1−ε, ε): the loss is then minimised at a return
gap of exactly log((1−ε)/ε), never more. Query selection by ensemble disagreement (PEBBLE's
uncertainty sampling) and SURF's semi-supervised pseudo-labels and temporal cropping live here too."""
from __future__ import annotations

import math
from typing import Annotated

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from paperline.config import StrictModel
from paperline.rl.nets import mlp

PositiveInt = Annotated[int, Field(ge=1)]


def smoothed_targets(y: torch.Tensor, eps: float) -> torch.Tensor:
    """PMR: hard labels 1 → 1−ε and 0 → ε; equal labels (½) stay ½. ε = 0 is the plain loss."""
    return y * (1 - 2 * eps) + eps


def bradley_terry_loss(returns0: torch.Tensor, returns1: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of P[σ⁰ ≻ σ¹] = softmax(R⁰, R¹)₀ against the target y (per pair)."""
    logits = torch.stack([returns0, returns1], -1)
    logp = F.log_softmax(logits, -1)
    return -(y * logp[..., 0] + (1 - y) * logp[..., 1]).mean()


def pmr_gap(eps: float) -> float:
    """The return gap Σr̂⁰ − Σr̂¹ that minimises the loss against target 1−ε: log((1−ε)/ε)."""
    return math.log((1 - eps) / eps)


class RewardSettings(StrictModel):
    ensemble: PositiveInt = 3
    hidden: PositiveInt = 256
    layers: PositiveInt = 3
    lr: float = Field(3e-4, gt=0)
    batch: PositiveInt = 128
    updates: PositiveInt = 200  # gradient steps per feedback session


class SURFSettings(StrictModel):
    """SURF (Park et al. 2022): pseudo-labels on unlabelled pairs the ensemble is sure of, and
    temporal cropping of each segment to a window of length in [(1−crop)·H, H]."""

    threshold: float = Field(0.99, gt=0.5, lt=1)
    unlabelled_ratio: PositiveInt = 4
    weight: float = Field(1.0, ge=0)
    crop: float = Field(0.2, ge=0, le=1)


class RewardEnsemble(nn.Module):
    """`pmr_eps`: PMR's ε (0: hard targets, PEBBLE); `surf`: SURF's settings, None without it."""

    def __init__(self, in_dim: int, settings: RewardSettings, generator: torch.Generator | None = None,
                 pmr_eps: float = 0.0, surf: SURFSettings | None = None):
        super().__init__()
        self.s, self.pmr_eps, self.surf = settings, pmr_eps, surf
        self.members = nn.ModuleList(mlp(in_dim, settings.hidden, settings.layers, 1, nn.Tanh(), generator)
                                     for _ in range(settings.ensemble))
        self.opt = torch.optim.Adam(self.parameters(), lr=settings.lr, fused=True)

    @property
    def device(self) -> torch.device:
        return next(self.members.parameters()).device  # the first member's first weight

    def _tensor(self, x: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(x, dtype=torch.float32, device=self.device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Per-member rewards: [ensemble, *x.shape[:-1]]."""
        return torch.stack([m(x).squeeze(-1) for m in self.members])

    @torch.no_grad()
    def mean_reward(self, x: np.ndarray) -> np.ndarray:
        return self(self._tensor(x)).mean(0).cpu().numpy()

    @torch.no_grad()
    def preference_probs(self, seg0: np.ndarray, seg1: np.ndarray) -> np.ndarray:
        """P[σ⁰ ≻ σ¹] per member: [ensemble, pairs]; segments [pairs, H, in_dim]."""
        r0, r1 = self(self._tensor(seg0)).sum(-1), self(self._tensor(seg1)).sum(-1)
        return torch.sigmoid(r0 - r1).cpu().numpy()

    def disagreement(self, seg0: np.ndarray, seg1: np.ndarray) -> np.ndarray:
        """PEBBLE's uncertainty: the std over members of P[σ⁰ ≻ σ¹], per pair."""
        return self.preference_probs(seg0, seg1).std(0)

    def accuracy(self, seg0: np.ndarray, seg1: np.ndarray, y: np.ndarray) -> float:
        """Share of pairs with a strict label (y ∈ {0, 1}) whose ensemble-mean return order agrees."""
        strict = (y == 0) | (y == 1)
        if not strict.any():
            return float("nan")
        p = self.preference_probs(seg0[strict], seg1[strict]).mean(0)
        return float(((p > 0.5) == (y[strict] == 1)).mean())

    def train_session(self, seg0: np.ndarray, seg1: np.ndarray, y: np.ndarray, rng: np.random.Generator,
                      unlabelled: tuple[np.ndarray, np.ndarray] | None = None) -> dict[str, float]:
        """`updates` steps on the labelled pairs (each member its own batches); with SURF also
        pseudo-labelled pairs from `unlabelled` and temporally cropped segments."""
        s, surf = self.s, self.surf
        seg0_t, seg1_t = self._tensor(seg0), self._tensor(seg1)
        y_t = smoothed_targets(self._tensor(y), self.pmr_eps)
        n = len(y)
        pool = None  # the unlabelled pairs as tensors once (a session draws its batches from them)
        if surf is not None and unlabelled is not None and len(unlabelled[0]):
            pool = self._tensor(unlabelled[0]), self._tensor(unlabelled[1])
        loss_sum = pseudo_sum = 0.0
        for _ in range(s.updates):
            loss = torch.zeros(())
            for m, member in enumerate(self.members):
                idx = torch.as_tensor(rng.integers(0, n, min(s.batch, n)), device=self.device)
                a, b = seg0_t[idx], seg1_t[idx]
                if surf is not None:
                    a, b = _crop(a, b, rng, surf.crop)
                loss = loss + bradley_terry_loss(member(a).squeeze(-1).sum(-1), member(b).squeeze(-1).sum(-1), y_t[idx])
                if pool is not None and surf is not None:
                    u = torch.as_tensor(rng.integers(0, len(pool[0]), min(s.batch * surf.unlabelled_ratio, len(pool[0]))),
                                        device=self.device)
                    ua, ub = _crop(pool[0][u], pool[1][u], rng, surf.crop)
                    r0, r1 = member(ua).squeeze(-1).sum(-1), member(ub).squeeze(-1).sum(-1)
                    p = torch.sigmoid(r0 - r1).detach()
                    sure = torch.maximum(p, 1 - p) > surf.threshold
                    if sure.any():
                        pseudo = (p[sure] > 0.5).float()
                        loss = loss + surf.weight * bradley_terry_loss(r0[sure], r1[sure], pseudo)
                        pseudo_sum += float(sure.float().mean()) / len(self.members)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            loss_sum += loss.item() / len(self.members)
        return {"reward_loss": loss_sum / s.updates, "pseudo_label_share": pseudo_sum / s.updates}


def _crop(a: torch.Tensor, b: torch.Tensor, rng: np.random.Generator, crop: float) -> tuple[torch.Tensor, torch.Tensor]:
    """SURF's temporal cropping: one window length H′ ∈ [⌈(1−crop)H⌉, H] for the batch, each segment
    cut at its own random offset (the pair's label kept). [I] SURF crops longer sampled segments
    around H; with segments of exactly H we crop inside them."""
    H = a.shape[1]
    length = int(rng.integers(max(1, math.ceil((1 - crop) * H)), H + 1))
    if length == H:
        return a, b
    offsets = torch.as_tensor(rng.integers(0, H - length + 1, (2, a.shape[0])), device=a.device)
    window = torch.arange(length, device=a.device)
    ia, ib = offsets[0][:, None] + window, offsets[1][:, None] + window
    rows = torch.arange(a.shape[0], device=a.device)[:, None]
    return a[rows, ia], b[rows, ib]
