"""Selection from influence scores (spec §b Objective and pipeline step 5).

- `round_robin`: scores (N, targets); targets take turns, in a new random order each round, each
  taking its highest-scoring sample not yet chosen, until k are chosen (the official
  `pick_first_order` / `_perform_selection_rr`). Training then uses the
  chosen samples without weights (the paper found that more stable).
- `first_order_weights`: the regularised first-order problem
  min −pᵀw + (λ/2)‖w‖² s.t. w ≥ 0, Σw = n, whose solution is w = (p − ν)₊/λ (a projection of p/λ
  onto the scaled simplex), with `lambda_for_k` finding by binary search the λ that leaves exactly k
  weights non-zero: the top k by p.
"""
from __future__ import annotations

import numpy as np
import torch


def round_robin(scores: torch.Tensor, k: int, seed: int | None = None) -> list[int]:
    """Indices of k samples, in the order they were taken. Each round visits the targets in a fresh
    random order (`seed`; the official `_perform_selection_rr` draws `np.random.permutation` per
    round "for fairness"), so no target always picks first; seed None: the targets' own order."""
    n, targets = scores.shape
    if k > n:
        raise ValueError(f"select_k {k} exceeds the pool size {n}")
    order = torch.argsort(scores, dim=0, descending=True, stable=True).T.tolist()  # per target, best first
    rng = np.random.default_rng(seed) if seed is not None else None
    pointer = [0] * targets
    taken = np.zeros(n, dtype=bool)
    chosen: list[int] = []
    while len(chosen) < k:
        for j in (rng.permutation(targets) if rng is not None else range(targets)):
            while taken[order[j][pointer[j]]]:
                pointer[j] += 1
            i = order[j][pointer[j]]
            taken[i] = True
            chosen.append(i)
            if len(chosen) == k:
                break
    return chosen


def project_scaled_simplex(x: np.ndarray, total: float) -> np.ndarray:
    """argmin ‖w − x‖ over w ≥ 0, Σw = total (sort-based)."""
    u = np.sort(x)[::-1]
    css = np.cumsum(u) - total
    rho = np.nonzero(u - css / np.arange(1, len(x) + 1) > 0)[0][-1]
    nu = css[rho] / (rho + 1)
    return np.maximum(x - nu, 0.0)


def first_order_weights(p: np.ndarray, lam: float) -> np.ndarray:
    """Solution of min −pᵀw + (λ/2)‖w‖², w ≥ 0, Σw = n."""
    return project_scaled_simplex(np.asarray(p, float) / lam, float(len(p)))


def lambda_for_k(p: np.ndarray, k: int, iters: int = 200) -> float:
    """A λ at which the first-order solution has exactly k non-zero weights (the support grows with λ)."""
    p = np.asarray(p, float)
    lo, hi = 1e-12, 1.0
    while np.count_nonzero(first_order_weights(p, hi)) < k and hi < 1e12:
        hi *= 2
    for _ in range(iters):
        mid = np.sqrt(lo * hi)
        nz = np.count_nonzero(first_order_weights(p, mid))
        if nz == k:
            return mid
        lo, hi = (mid, hi) if nz < k else (lo, mid)
    raise ValueError(f"no λ gives exactly {k} non-zero weights (ties in p?)")
