"""Ground-truth Shapley values of a game over n players: exact enumeration (small n, tests) and
permutation sampling (the digits MLP's neurons), resumable by chunks of permutations."""
from __future__ import annotations

import itertools
import math
from typing import Callable

import torch

# value(masks) -> values: masks (K, n) bool (True: the player is present), values (K,)
ValueFn = Callable[[torch.Tensor], torch.Tensor]


def _values(value: ValueFn, masks: torch.Tensor) -> torch.Tensor:
    out = value(masks)
    if not isinstance(out, torch.Tensor) or out.shape != (len(masks),):
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"value function returned {shape} for {len(masks)} coalitions: expected ({len(masks)},)")
    return out.to(torch.float64)


def exact_shapley(value: ValueFn, n: int) -> torch.Tensor:
    """φᵢ = Σ_{S ⊆ N∖i} |S|!(n−|S|−1)!/n! (v(S∪i) − v(S)), by enumerating all 2ⁿ coalitions."""
    if not 1 <= n <= 16:
        raise ValueError(f"n = {n}: exact enumeration is for 1 ≤ n ≤ 16 players")
    masks = torch.tensor(list(itertools.product([False, True], repeat=n)))
    v = dict(zip((tuple(m.tolist()) for m in masks), _values(value, masks).tolist()))
    phi = torch.zeros(n, dtype=torch.float64)
    for coalition, v_s in v.items():
        size = sum(coalition)
        for i in range(n):
            if not coalition[i]:
                weight = math.factorial(size) * math.factorial(n - size - 1) / math.factorial(n)
                phi[i] += weight * (v[coalition[:i] + (True,) + coalition[i + 1:]] - v_s)
    return phi


def prefix_masks(order: torch.Tensor) -> torch.Tensor:
    """(n+1, n) coalitions of a permutation: the first k players present, k = 0..n."""
    n = len(order)
    ranks = torch.empty(n, dtype=torch.long)
    ranks[order] = torch.arange(n)
    return ranks[None, :] < torch.arange(n + 1)[:, None]


def marginals(value: ValueFn, orders: torch.Tensor) -> torch.Tensor:
    """(P, n) marginal contributions v(prefix + i) − v(prefix) of each player in each permutation,
    the P permutations' coalitions valued in one call."""
    P, n = orders.shape
    masks = torch.cat([prefix_masks(o) for o in orders])
    v = _values(value, masks).view(P, n + 1)
    steps = v[:, 1:] - v[:, :-1]  # steps[p, k]: the k-th player of permutation p joining
    out = torch.empty_like(steps)
    out.scatter_(1, orders, steps)
    return out


def permutation_shapley(value: ValueFn, n: int, permutations: int, generator: torch.Generator,
                        chunk: int = 25, progress_state: dict | None = None,
                        on_chunk: Callable[[dict], None] | None = None, progress: bool = False) -> dict:
    """Monte-Carlo Shapley values from `permutations` uniform permutations, `chunk` at a time.
    Every permutation's marginals sum to v(N) − v(∅), so the estimate is efficient exactly.
    Returns {"phi", "phi_first_half", "phi_second_half", "stderr", "done", "sum", "sum_sq", "half"}:
    a resumed run passes the last state as `progress_state` (the generator restored by its caller);
    `on_chunk(state)` is called after each chunk (to checkpoint it)."""
    from tqdm.auto import tqdm

    state = progress_state or {"done": 0, "sum": torch.zeros(n, dtype=torch.float64),
                               "sum_sq": torch.zeros(n, dtype=torch.float64),
                               "half": torch.zeros(n, dtype=torch.float64)}
    half = permutations // 2
    bar = tqdm(total=permutations, initial=state["done"], desc="shapley", disable=not progress, leave=False)
    while state["done"] < permutations:
        k = min(chunk, permutations - state["done"])
        orders = torch.stack([torch.randperm(n, generator=generator) for _ in range(k)])
        m = marginals(value, orders)
        state["sum"] += m.sum(0)
        state["sum_sq"] += m.square().sum(0)
        first = max(0, min(k, half - state["done"]))  # the rows of this chunk in the first half
        state["half"] += m[:first].sum(0)
        state["done"] += k
        bar.update(k)
        if on_chunk:
            on_chunk(state)
    bar.close()
    done = state["done"]
    mean = state["sum"] / done
    var = (state["sum_sq"] / done - mean.square()).clamp_min(0)
    return {**state, "phi": mean, "stderr": (var / done).sqrt(),
            "phi_first_half": state["half"] / max(half, 1),
            "phi_second_half": (state["sum"] - state["half"]) / max(done - half, 1)}


def _average_ranks(x: torch.Tensor) -> torch.Tensor:
    ranks = torch.empty_like(x)
    ranks[torch.argsort(x)] = torch.arange(len(x), dtype=x.dtype)
    values, inverse = torch.unique(x, return_inverse=True)
    mean_rank = torch.zeros(len(values), dtype=x.dtype).index_add_(0, inverse, ranks) / torch.bincount(inverse)
    return mean_rank[inverse]


def spearman(a, b) -> float:
    """Spearman's rank correlation (average ranks for ties; scipy.stats.spearmanr's value, without
    its multi-second import)."""
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    if a.shape != b.shape or a.dim() != 1:
        raise ValueError(f"spearman: shapes {tuple(a.shape)} and {tuple(b.shape)}: expected two equal 1-d vectors")
    ra, rb = _average_ranks(a), _average_ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    return float((ra * rb).sum() / (ra.norm() * rb.norm()))
