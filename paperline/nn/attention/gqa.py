"""Grouped-query attention (Ainslie et al. 2023): h query heads share G key/value heads.
Parameters 2·d·d_h·(h+G); cache 2·G·d_h per token per layer (K pre-rotated, V)."""
from __future__ import annotations

import torch
from torch import nn

from paperline.nn.attention.common import append_cache, causal_sdpa, rope_at, rotate


class GroupedQueryAttention(nn.Module):
    def __init__(self, config, num_kv_heads: int | None = None):
        super().__init__()
        self.num_heads = config.num_heads
        self.num_kv_heads = num_kv_heads if num_kv_heads is not None else config.num_kv_heads
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}")
        self.head_dim = config.head_dim
        self.rope_base = config.rope_base
        d, hd = config.hidden_size, config.head_dim
        self.q_proj = nn.Linear(d, self.num_heads * hd, bias=False)
        self.k_proj = nn.Linear(d, self.num_kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(d, self.num_kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(self.num_heads * hd, d, bias=False)

    @property
    def cache_elements_per_token(self) -> int:
        return 2 * self.num_kv_heads * self.head_dim

    def forward(self, x: torch.Tensor, offset: int = 0, cache: dict | None = None):
        B, T, _ = x.shape
        cos, sin = rope_at(offset, T, self.head_dim, self.rope_base, x.device, x.dtype)
        q = rotate(self.q_proj(x).view(B, T, self.num_heads, self.head_dim), cos, sin)
        k = rotate(self.k_proj(x).view(B, T, self.num_kv_heads, self.head_dim), cos, sin)
        v = self.v_proj(x).view(B, T, self.num_kv_heads, self.head_dim)
        cache = append_cache(cache, {"k": k, "v": v})
        if cache is not None:
            k, v = cache["k"], cache["v"]
        y = causal_sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), offset)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, -1)), cache
