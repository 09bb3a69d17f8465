"""kNN-LM next-token distributions (spec §b.2): p_kNN(v) = Σ_{i: val_i = v} softmax(−d_i/τ) over the
k nearest keys by squared L2 distance d_i. For the MemDec's training targets the query is itself in
the datastore: its own entry is dropped (`ignore_first` in the official code; here matched by id,
which stays right when a duplicate key ties with it or an approximate index misses it)."""
from __future__ import annotations

import numpy as np
import torch


def drop_self(distances: np.ndarray, ids: np.ndarray, self_ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """From a search of k+1 neighbours, the k that are not the query's own entry (by id); when the
    own entry was not found, the k nearest."""
    if distances.shape[1] < k + 1:
        raise ValueError(f"drop_self needs k+1 = {k + 1} neighbours, got {distances.shape[1]}")
    is_self = ids == self_ids[:, None]
    # the position to drop per row: the own entry where present, else the farthest (last) one
    drop = np.where(is_self.any(1), is_self.argmax(1), distances.shape[1] - 1)
    keep = np.ones_like(ids, dtype=bool)
    keep[np.arange(len(ids)), drop] = False
    return distances[keep].reshape(len(ids), -1)[:, :k], ids[keep].reshape(len(ids), -1)[:, :k]


def neighbour_weights(distances: np.ndarray | torch.Tensor, temperature: float) -> torch.Tensor:
    """softmax(−d/τ) over each row's neighbours (float32). Faiss marks missing neighbours (an
    IVF probe with too few entries) with id −1 and distance ≈ 3.4e38: their weight is 0."""
    d = torch.as_tensor(np.asarray(distances), dtype=torch.float32)
    return torch.softmax(-d / temperature, dim=-1)


def knn_distribution(distances, neighbour_values, vocab_size: int, temperature: float) -> torch.Tensor:
    """Dense p_kNN (N, vocab): the neighbour weights summed per value token."""
    weights = neighbour_weights(distances, temperature)
    values = torch.as_tensor(np.asarray(neighbour_values), dtype=torch.int64)
    return torch.zeros(len(weights), vocab_size).scatter_add_(1, values, weights)


def knn_target_probability(distances, neighbour_values, targets, temperature: float) -> torch.Tensor:
    """p_kNN(target) per row, without the dense distribution (what a perplexity needs)."""
    weights = neighbour_weights(distances, temperature)
    values = torch.as_tensor(np.asarray(neighbour_values), dtype=torch.int64)
    return (weights * (values == torch.as_tensor(np.asarray(targets))[:, None]).float()).sum(1)
