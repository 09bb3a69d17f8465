"""First-order influence (spec §b Objective, Adam, pipeline step 3).

- `adam_coefficients`: with the warm-up's AdamW moments held fixed at step t, the next update is
  affine in the new gradient, Δθ = −η(a ⊙ g + b), with
  a = (1−β₁)/(1−β₁^{t+1}) / (sqrt(v/(1−β₂^{t+1})) + eps); b is the same for every sample, so the
  Adam-aware influence of sample i on target j is p_ij = ⟨a ⊙ g_i, g_j⟩.
- `per_sample_gradients`: `torch.func.vmap(grad(...))` of each sample's assistant-token loss over
  the MLP `down_proj` weights only (the official code's choice), flattened.
- `HadamardProjector`: the randomised Hadamard transform (random signs, a fast Walsh–Hadamard
  transform, a random subset of coordinates), applied after L2 normalisation (spec pitfall: normalise
  first). Source gradients get the Adam scaling, target gradients do not (pitfall).
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
from torch.func import functional_call, grad, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel

from paperline.methods.influence_distillation.model import InfluenceLM, TokenizedSet, masked_lm_loss


def adam_coefficients(optimizer: torch.optim.Optimizer, model: InfluenceLM, names: Sequence[str]) -> torch.Tensor:
    """a (flattened over `names`) from an Adam/AdamW optimizer's state after its warm-up steps."""
    params = dict(model.named_parameters())
    group = optimizer.param_groups[0]
    beta1, beta2 = group["betas"]
    eps = group["eps"]
    parts = []
    for name in names:
        state = optimizer.state.get(params[name])
        if not state:
            raise ValueError(f"no optimizer state for {name}: run the warm-up first")
        t = int(state["step"])
        v_hat = state["exp_avg_sq"] / (1 - beta2 ** (t + 1))
        parts.append(((1 - beta1) / (1 - beta1 ** (t + 1)) / (v_hat.sqrt() + eps)).reshape(-1).float().cpu())
    return torch.cat(parts)


def per_sample_gradients(model: InfluenceLM, data: TokenizedSet, index: Sequence[int], names: Sequence[str],
                         chunk: int = 32, coordinates: torch.Tensor | None = None) -> torch.Tensor:
    """(len(index), d) gradients of each sample's own loss w.r.t. the parameters `names`
    (optionally only the flattened `coordinates`), one vmap call per chunk."""
    all_params = {k: v.detach() for k, v in model.named_parameters()}
    wrt = {k: all_params[k] for k in names}

    def sample_loss(params, tokens, mask):
        merged = all_params | params
        logits = functional_call(model, merged, (tokens[None],))
        return masked_lm_loss(logits, tokens[None], mask[None])

    grad_fn = vmap(grad(sample_loss), in_dims=(None, 0, 0))
    out = []
    index = list(index)
    # the math attention kernel: vmap has batching rules for it (the fused CPU one falls back to a loop)
    with sdpa_kernel(SDPBackend.MATH):
        for start in range(0, len(index), chunk):
            tokens, mask = data.batch(index[start:start + chunk])
            grads = grad_fn(wrt, tokens, mask)
            flat = torch.cat([grads[k].reshape(len(tokens), -1) for k in names], dim=1).float().cpu()
            out.append(flat if coordinates is None else flat[:, coordinates])
    return torch.cat(out)


def fwht(x: torch.Tensor) -> torch.Tensor:
    """Orthonormal fast Walsh–Hadamard transform along the last dimension (a power of two)."""
    n = x.shape[-1]
    if n & (n - 1):
        raise ValueError(f"fwht needs a power-of-two length, got {n}")
    lead = x.shape[:-1]
    y = x.reshape(-1, n)
    h = 1
    while h < n:
        y = y.view(-1, n // (2 * h), 2, h)
        y = torch.stack((y[:, :, 0] + y[:, :, 1], y[:, :, 0] - y[:, :, 1]), dim=2).view(-1, n)
        h *= 2
    return (y / math.sqrt(n)).view(*lead, n)


class HadamardProjector:
    """x ↦ sqrt(n/m) · (H D x)[S]: D random signs, H the orthonormal Hadamard matrix of the next power
    of two n ≥ dim (x zero-padded), S m random coordinates. Norms and inner products are preserved
    in expectation; with m ≥ n it is the (orthogonal) full transform."""

    def __init__(self, dim: int, proj_dim: int, seed: int):
        self.dim = dim
        self.n = 1 << max(0, (dim - 1).bit_length())
        g = torch.Generator().manual_seed(seed)
        self.signs = torch.randint(0, 2, (dim,), generator=g).float() * 2 - 1
        self.m = min(proj_dim, self.n)
        self.rows = torch.randperm(self.n, generator=g)[:self.m]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        padded = torch.zeros(*x.shape[:-1], self.n, dtype=torch.float32)
        padded[..., :self.dim] = x.float() * self.signs
        return fwht(padded)[..., self.rows] * math.sqrt(self.n / self.m)


def normalize_rows(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)


class GradientFeaturizer:
    """Normalised, projected down_proj gradients; source rows Adam-scaled when `adam` is given.
    `evaluations` counts the per-sample gradients computed (the selection-cost measure)."""

    def __init__(self, model: InfluenceLM, names: Sequence[str], proj_dim: int, seed: int,
                 adam: torch.Tensor | None = None, max_elements: int | None = None, chunk: int = 32):
        self.model, self.names, self.chunk = model, list(names), chunk
        params = dict(model.named_parameters())
        dim = sum(params[k].numel() for k in self.names)
        self.coordinates = None
        if max_elements is not None and max_elements < dim:  # the official code's random mask
            g = torch.Generator().manual_seed(seed + 1)
            self.coordinates = torch.randperm(dim, generator=g)[:max_elements].sort().values
            dim = max_elements
        self.adam = None if adam is None else (adam if self.coordinates is None else adam[self.coordinates])
        self.projector = HadamardProjector(dim, proj_dim, seed)
        self.evaluations = 0

    def features(self, data: TokenizedSet, index: Sequence[int], source: bool) -> torch.Tensor:
        return self.features_both(data, index)[0 if source else 1]

    def features_both(self, data: TokenizedSet, index: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """(Adam-scaled, plain) features from one set of per-sample gradients (one evaluation each)."""
        g = per_sample_gradients(self.model, data, index, self.names, self.chunk, self.coordinates)
        self.evaluations += len(g)
        plain = self.projector(normalize_rows(g))
        if self.adam is None:
            return plain, plain
        return self.projector(normalize_rows(g * self.adam)), plain
