"""Baselines of the same run (spec §c, §e): uniform random selection, and an RDS+-like selection by
cosine similarity of mean-pooled final hidden states (RDS+: model-embedding cosine, round-robin over
target examples). The third, exact first-order influence on the whole pool, is the
`exact_first_order` path of the pipeline (the same features as the landmarks, for every sample)."""
from __future__ import annotations

import torch

from paperline.methods.influence_distillation.model import InfluenceLM, TokenizedSet
from paperline.methods.influence_distillation.selection import round_robin


def random_selection(n: int, k: int, seed: int) -> list[int]:
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed))[:k].tolist()


@torch.no_grad()
def mean_pooled_embeddings(model: InfluenceLM, data: TokenizedSet, batch_size: int = 64) -> torch.Tensor:
    """Mean of the final (normed) hidden states over each sample's real tokens."""
    out = []
    for start in range(0, len(data), batch_size):
        index = torch.arange(start, min(start + batch_size, len(data)))
        tokens, _ = data.batch(index)
        hidden = model.hidden_states(tokens).float()
        real = (torch.arange(tokens.shape[1])[None] < data.lengths[index][:, None]).float()
        real = real.to(hidden.device)
        out.append(((hidden * real[..., None]).sum(1) / real.sum(1, keepdim=True)).cpu())
    return torch.cat(out)


def rds_scores(pool_emb: torch.Tensor, target_emb: torch.Tensor) -> torch.Tensor:
    """Cosine similarity (N, targets)."""
    a = pool_emb / pool_emb.norm(dim=1, keepdim=True).clamp_min(1e-12)
    b = target_emb / target_emb.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return a @ b.T


def rds_selection(pool_emb: torch.Tensor, target_emb: torch.Tensor, k: int) -> list[int]:
    return round_robin(rds_scores(pool_emb, target_emb), k)
