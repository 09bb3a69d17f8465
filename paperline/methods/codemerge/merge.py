"""CodeMerge's selection and merges, as plain functions on flat parameter dicts
({name: tensor}, every entry a model's state_dict entry):

- fingerprints: an unscaled Gaussian random projection of penultimate features, R redrawn at every
  scoring call (spec (b)1 and (f): the official code does so; consistent within a call);
- ridge leverage scores s_i = f_iᵀ(FᵀF/N + λI)⁻¹f_i of the centred keys, in the primal (d′×d′)
  and the dual (N×N, push-through identity) forms, which are equal;
- top-K selection (all when N ≤ K);
- TIES over task vectors as the official `merge_utils` does it (trim to the top `keep` fraction of
  magnitudes per task vector over all parameters, elect each entry's sign by the sum, disjoint
  mean), then Θ* = Θ₀ + scale·τ (spec (b)3 / (f));
- the RLS-weighted average Θ* = Σ w_i Θ_i, w_i = s_i / Σ s_j (the paper's wording; our variant);
- the MOS-like weighted average, its weights from a forward pass of every stored checkpoint.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch

State = dict[str, torch.Tensor]


def random_projection(features: torch.Tensor, dim: int, generator: torch.Generator) -> torch.Tensor:
    """(N, d) features → (N, dim) keys with a fresh R ~ N(0, 1)^{d×dim}, unscaled as in the code."""
    R = torch.randn(features.shape[1], dim, generator=generator, dtype=torch.float64)
    return features.double() @ R


def _centred(keys: torch.Tensor) -> torch.Tensor:
    keys = keys.double()
    return keys - keys.mean(0, keepdim=True)


def rls_primal(keys: torch.Tensor, ridge: float) -> torch.Tensor:
    """s_i = f_iᵀ H⁻¹ f_i, H = FᵀF/N + λI (d×d): the form spec (b)2 writes."""
    F = _centred(keys)
    N, d = F.shape
    H = F.T @ F / N + ridge * torch.eye(d, dtype=F.dtype)
    return (F * torch.linalg.solve(H, F.T).T).sum(1)


def rls_dual(keys: torch.Tensor, ridge: float) -> torch.Tensor:
    """The same scores from the N×N Gram matrix K = FFᵀ: F(FᵀF/N + λI)⁻¹Fᵀ = N·K(K + NλI)⁻¹
    (cheaper when N < d)."""
    F = _centred(keys)
    N = len(F)
    K = F @ F.T
    return N * torch.diagonal(torch.linalg.solve(K + N * ridge * torch.eye(N, dtype=F.dtype), K))


def leverage_scores(keys: torch.Tensor, ridge: float) -> torch.Tensor:
    """Whichever form is cheaper for these keys."""
    return rls_dual(keys, ridge) if len(keys) < keys.shape[1] else rls_primal(keys, ridge)


def select_top_k(scores: torch.Tensor, k: int) -> list[int]:
    """Indices of the k largest scores (ties: the earlier checkpoint), or all when there are ≤ k."""
    if len(scores) <= k:
        return list(range(len(scores)))
    order = sorted(range(len(scores)), key=lambda i: (-float(scores[i]), i))
    return sorted(order[:k])


def _flat(state: State, names: Sequence[str]) -> torch.Tensor:
    return torch.cat([state[n].reshape(-1).double() for n in names])


def _unflat(vector: torch.Tensor, like: State, names: Sequence[str]) -> State:
    out, i = dict(like), 0
    for n in names:
        numel = like[n].numel()
        out[n] = vector[i:i + numel].view_as(like[n]).to(like[n].dtype)
        i += numel
    return out


def _merged_names(state: State) -> list[str]:
    return [n for n, t in state.items() if torch.is_floating_point(t)]


def trim_top_fraction(task_vectors: torch.Tensor, keep: float) -> torch.Tensor:
    """Zero all but the top `keep` fraction of |entries| of each row (merge_utils.topk_values_mask:
    k = d − int(d·keep), keep entries ≥ the k-th smallest magnitude)."""
    n, d = task_vectors.shape
    k = d - int(d * keep)
    if k <= 0:
        return task_vectors.clone()
    kth = task_vectors.abs().kthvalue(k, dim=1, keepdim=True).values
    return task_vectors * (task_vectors.abs() >= kth)


def elect_signs(task_vectors: torch.Tensor) -> torch.Tensor:
    """The sign of each entry's sum over task vectors; a zero sum takes the majority sign (that of
    the total), as merge_utils.resolve_sign does."""
    signs = torch.sign(task_vectors.sum(0))
    majority = torch.sign(signs.sum())
    return torch.where(signs == 0, majority, signs)


def disjoint_mean(task_vectors: torch.Tensor, signs: torch.Tensor) -> torch.Tensor:
    """The mean of the entries that agree with the elected sign (zeros do not count)."""
    agree = torch.where(signs[None] > 0, task_vectors > 0, task_vectors < 0)
    selected = task_vectors * agree
    return selected.sum(0) / (selected != 0).sum(0).clamp(min=1)


def ties_merge(anchor: State, checkpoints: Sequence[State], keep: float = 0.9, scale: float = 0.85) -> State:
    """Θ₀ + scale · TIES(Θ_i − Θ₀) over the floating-point entries (others kept from the anchor)."""
    names = _merged_names(anchor)
    base = _flat(anchor, names)
    tau = torch.stack([_flat(c, names) - base for c in checkpoints])
    tau = trim_top_fraction(tau, keep)
    return _unflat(base + scale * disjoint_mean(tau, elect_signs(tau)), anchor, names)


def weighted_average(checkpoints: Sequence[State], weights: Sequence[float] | torch.Tensor) -> State:
    """Σ w_i Θ_i over the floating-point entries (weights as given: normalise them first)."""
    names = _merged_names(checkpoints[0])
    w = torch.as_tensor(weights, dtype=torch.float64)
    merged = (w[:, None] * torch.stack([_flat(c, names) for c in checkpoints])).sum(0)
    return _unflat(merged, checkpoints[0], names)


def rls_weights(scores: torch.Tensor) -> torch.Tensor:
    """w_i = s_i / Σ s_j over the selected checkpoints (scores are ≥ 0 up to rounding)."""
    s = scores.double().clamp(min=0)
    return s / s.sum() if s.sum() > 0 else torch.full_like(s, 1 / len(s))


def mos_weights(checkpoints: Sequence[State], batch: torch.Tensor,
                logits_of: Callable[[State, torch.Tensor], torch.Tensor], temperature: float = 1.0) -> torch.Tensor:
    """[I] MOS-like weights: a forward pass of every checkpoint on the current batch, w ∝
    exp(−mean prediction entropy / T) (confident checkpoints weigh more). MOS's own synergy weights
    were not retrieved (spec (c)); what matters here is its cost: one forward pass per checkpoint."""
    entropies = []
    for state in checkpoints:
        p = logits_of(state, batch).double().softmax(-1)
        entropies.append(-(p * p.clamp_min(1e-12).log()).sum(-1).mean())
    return torch.softmax(-torch.stack(entropies) / temperature, 0)
