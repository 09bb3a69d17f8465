"""Preference Transformer (Kim et al., ICLR 2023), the paper's offline baseline (`pt`): a reward
model of non-Markovian per-step rewards whose segment score is a learned weighted sum of them,
fitted with the Bradley–Terry cross-entropy on the same labels as the other offline variants;
the data relabelled with its per-step rewards, then IQL as the `iql` and `mr` extractions.

The model, top to bottom:

1. Tokens: each step's state and action embedded separately (a linear map each) plus a learned
   embedding of the step's position in the segment, interleaved s₁, a₁, s₂, a₂, … (2H tokens).
2. A causal transformer over them (`nn.TransformerEncoder`, pre-norm GPT-style blocks, a causal
   mask): x_t, its output at a_t's token, holds the history (s₁, a₁, …, s_t, a_t).
3. The preference attention: from each x_t a query q_t, a key k_t and the reward r̂_t (one linear
   map); z_i = Σ_t softmax_t(q_i·k_t/√d) r̂_t (attention over the whole segment, both directions:
   the paper's bidirectional self-attention, with r̂ as the values), and the segment's score
   S = (1/H) Σ_i z_i = Σ_t w_t r̂_t, with w_t = (1/H) Σ_i softmax_t(q_i·k_t/√d): non-negative
   weights summing to 1.
4. P[σ⁰ ≻ σ¹] = exp S⁰ / (exp S⁰ + exp S¹), cross-entropy against the labels (½ on equal ones).

What follows the paper (its text as the `search` tool holds it, the abstract and the caption of its
Figure 2): the preference model (a weighted sum of non-Markovian rewards, the weights a convex
combination from a bidirectional attention over the causal transformer's outputs, the rewards its
values), the causal transformer's x_t holding the history up to t, the Bradley–Terry loss, and IQL
on the relabelled data. Reconstructed [R] (the text at hand does not fix them, or we scale them):
- the tokens laid out as Decision Transformer's (a state and an action token a step, r̂ read at
  the action's), and the settings' defaults (one causal block, 4 heads, embedding 256, dropout 0.1,
  AdamW at lr 1e-4): the paper's as we recall its appendix, not re-read here;
- relabelling: each transition's reward is r̂ at its step given at most H − 1 preceding steps of
  its episode (the window of the segment length that ends there; at an episode's first steps the
  episode's first window, read at the step's position, so a step never sees its future);
- positions are those within the window (0 … H − 1), not the episode's time step;
- the attention scale 1/√d, one head in the preference attention, no learning-rate warm-up;
- r̂ is unbounded (no tanh) and not normalised before IQL (the other variants' r̂ is the tanh
  ensemble's); the weighted sum is a mean, so r̂ takes the scale of a segment's return gap;
- the smoke profile's model is smaller (`offline.pt` in params/star.yaml) and its steps fewer.

Every random draw of the fit (initialisation, batches, dropout) comes from the seed: the same
rewards whichever variants ran before, which the offline run's per-variant resume relies on."""

from __future__ import annotations

import math
from typing import Annotated

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from paperline.config import StrictModel
from paperline.rl.offline import PreferenceLabels, Transitions
from paperline.rl.reward_model import bradley_terry_loss
from paperline.seeds import seeded_init

PositiveInt = Annotated[int, Field(ge=1)]


class PTSettings(StrictModel):
    """The defaults: the paper's as we recall them (module docstring, [R])."""

    embed: PositiveInt = 256
    layers: PositiveInt = 1  # causal transformer blocks
    heads: PositiveInt = 4
    dropout: float = Field(0.1, ge=0, lt=1)
    lr: float = Field(1e-4, gt=0)
    batch: PositiveInt = 256  # label pairs per step
    updates: PositiveInt = 2000  # gradient steps (fitted once)


class PreferenceTransformer(nn.Module):
    """Steps 1-3 of the module docstring: per-step rewards r̂ and the segment's score S."""

    def __init__(self, obs_dim: int, act_dim: int, segment: int, settings: PTSettings):
        super().__init__()
        d = settings.embed
        self.embed = d
        self.state_embed = nn.Linear(obs_dim, d)
        self.action_embed = nn.Linear(act_dim, d)
        self.position = nn.Embedding(segment, d)
        self.embed_norm = nn.LayerNorm(d)
        block = nn.TransformerEncoderLayer(
            d, settings.heads, 4 * d, settings.dropout, activation="gelu", batch_first=True, norm_first=True
        )
        self.causal = nn.TransformerEncoder(block, settings.layers, norm=nn.LayerNorm(d), enable_nested_tensor=False)
        self.preference_attention = nn.Linear(d, 2 * d + 1)  # query, key and the reward r̂ of each step

    def history(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        """x_t for segments obs [B, H, obs_dim], act [B, H, act_dim]: [B, H, embed], each from the
        segment's steps up to t only."""
        H = obs.shape[1]
        position = self.position(torch.arange(H, device=obs.device))
        tokens = torch.stack([self.state_embed(obs) + position, self.action_embed(act) + position], 2).flatten(1, 2)
        mask = nn.Transformer.generate_square_subsequent_mask(2 * H, device=obs.device)
        return self.causal(self.embed_norm(tokens), mask=mask, is_causal=True)[:, 1::2]  # at the action tokens

    def _attention_inputs(self, obs: torch.Tensor, act: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.preference_attention(self.history(obs, act)).split([self.embed, self.embed, 1], -1)

    def forward(self, obs: torch.Tensor, act: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(r̂ [B, H], the segment scores S = Σ_t w_t r̂_t [B])."""
        query, key, reward = self._attention_inputs(obs, act)
        z = F.scaled_dot_product_attention(query, key, reward)  # z_i = Σ_t softmax_t(q_i·k_t/√d) r̂_t
        return reward.squeeze(-1), z.squeeze(-1).mean(-1)

    @torch.no_grad()
    def step_weights(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        """w_t [B, H]: the same attention with the identity as values gives softmax_t(q_i·k_t/√d)
        itself; its mean over the queries i."""
        query, key, _ = self._attention_inputs(obs, act)
        eye = torch.eye(obs.shape[1], device=obs.device).expand(obs.shape[0], -1, -1)
        return F.scaled_dot_product_attention(query, key, eye).mean(1)


def segments(
    data: Transitions, starts: np.ndarray, segment: int, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """The (obs, act) of the segments of `segment` steps from `starts`: [n, H, ·] each."""
    idx = starts[:, None] + np.arange(segment)
    return torch.as_tensor(data.obs[idx], device=device), torch.as_tensor(data.act[idx], device=device)


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def fit(
    data: Transitions,
    labels: PreferenceLabels,
    segment: int,
    settings: PTSettings,
    seed: int,
    device: torch.device | str = "cpu",
) -> PreferenceTransformer:
    """The model fitted by `updates` AdamW steps on batches of the labelled pairs, on `device` (the
    paper profile's: the offline task's GPU where it holds one)."""
    # the global generators, forked: initialisation and dropout (CUDA's on a GPU) from the seed. The
    # whole fit holds seeded_init's lock, not the build alone: dropout takes no generator and draws
    # from the process-wide one, which a fit outside the lock would share with other threads
    with seeded_init(seed, cuda=torch.device(device).type == "cuda"):
        model = PreferenceTransformer(data.obs.shape[1], data.act.shape[1], segment, settings).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=settings.lr)
        seg0, seg1 = segments(data, labels.start0, segment, device), segments(data, labels.start1, segment, device)
        y = torch.as_tensor(labels.y, dtype=torch.float32, device=device)
        rng = np.random.default_rng([seed, 15])
        model.train()
        for _ in range(settings.updates):
            idx = torch.as_tensor(rng.integers(0, len(y), min(settings.batch, len(y))), device=device)
            _, score0 = model(seg0[0][idx], seg0[1][idx])
            _, score1 = model(seg1[0][idx], seg1[1][idx])
            loss = bradley_terry_loss(score0, score1, y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model.eval()


@torch.no_grad()
def accuracy(
    model: PreferenceTransformer,
    data: Transitions,
    starts0: np.ndarray,
    starts1: np.ndarray,
    y: np.ndarray,
    segment: int,
) -> float:
    """Share of the pairs with a strict label y (1: the first segment preferred, 0: the second; ½:
    neither) whose score order agrees with it (NaN: none)."""
    strict = y != 0.5
    if not strict.any():
        return math.nan
    _, score0 = model(*segments(data, starts0[strict], segment, _device(model)))
    _, score1 = model(*segments(data, starts1[strict], segment, _device(model)))
    return float(((score0 > score1).cpu().numpy() == (y[strict] == 1)).mean())


@torch.no_grad()
def relabel(model: PreferenceTransformer, data: Transitions, segment: int, chunk: int = 1024) -> np.ndarray:
    """r̂ of every transition given at most `segment` − 1 preceding steps of its episode (module
    docstring, [R]): [n] float32. Episodes are contiguous rows of the data."""
    n = len(data)
    episodes, first = np.unique(data.episode, return_index=True)
    episode_start = first[np.searchsorted(episodes, data.episode)]
    position = np.minimum(np.arange(n) - episode_start, segment - 1)
    # the window of `segment` rows from `start`; rows past the episode (or the data) lie after the
    # step read, which the causal mask hides from it
    start = np.arange(n) - position
    out = np.empty(n, np.float32)
    for lo in range(0, n, chunk):
        rows = np.arange(lo, min(lo + chunk, n))
        idx = np.minimum(start[rows, None] + np.arange(segment), n - 1)
        obs, act = (torch.as_tensor(x[idx], device=_device(model)) for x in (data.obs, data.act))
        reward, _ = model(obs, act)
        out[rows] = reward.cpu().numpy()[np.arange(len(rows)), position[rows]]
    return out
