"""TPA-KVonly (T6's `model/T6_kvonly.py`): Q is a standard projection (h × d_h, RoPE on Q), only K
and V are factorized as in `tpa.py`. Parameters d(R_K+R_V)(h+d_h) + 2·d·h·d_h; the cache is the same
(R_K+R_V)(h+d_h) factors. Cached decoding contracts Q with the cached B̃_K first, then with A_K,
and never materializes K or V."""
from __future__ import annotations

import math

import torch
from torch import nn

from paperline.nn.attention.common import append_cache, causal_sdpa, rope_at, rotate
from paperline.nn.attention.tpa import FactorProjection, decode_block_size, factor_attention, materialize


class TensorProductAttentionKVOnly(nn.Module):
    def __init__(self, config):
        super().__init__()
        d, h, hd = config.hidden_size, config.num_heads, config.head_dim
        self.num_heads, self.head_dim, self.rope_base = h, hd, config.rope_base
        self.k_rank, self.v_rank = config.k_rank, config.v_rank
        self.decode_block: int | None = None  # None: sized by tpa.DECODE_BLOCK_ELEMENTS
        self.q_proj = nn.Linear(d, h * hd, bias=False)
        self.k = FactorProjection(d, h, hd, self.k_rank)
        self.v = FactorProjection(d, h, hd, self.v_rank)
        self.o_proj = nn.Linear(h * hd, d, bias=False)

    @property
    def cache_elements_per_token(self) -> int:
        return (self.k_rank + self.v_rank) * (self.num_heads + self.head_dim)

    def forward(self, x: torch.Tensor, offset: int = 0, cache: dict | None = None):
        B, T, _ = x.shape
        cos, sin = rope_at(offset, T, self.head_dim, self.rope_base, x.device, x.dtype)
        q = rotate(self.q_proj(x).view(B, T, self.num_heads, self.head_dim), cos, sin)
        a_k, b_k = self.k(x)
        b_k = rotate(b_k, cos, sin)
        a_v, b_v = self.v(x)
        new = {"a_k": a_k, "b_k": b_k, "a_v": a_v, "b_v": b_v}
        if not cache:  # training, or a prefill that starts the cache
            k, v = materialize(a_k, b_k), materialize(a_v, b_v)
            y = causal_sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), offset).transpose(1, 2)
            cache = append_cache(cache, new)
        else:
            cache = append_cache(cache, new)
            assert cache is not None  # a cache that holds tokens grows
            scale = 1.0 / (math.sqrt(self.head_dim) * self.k_rank)

            def logits(start: int, stop: int) -> torch.Tensor:
                qb = torch.einsum("bqhd,bmsd->bqhms", q, cache["b_k"][:, start:stop])
                a_k = cache["a_k"][:, start:stop].permute(0, 3, 1, 2)  # (B, h, m, R_K)
                return scale * (qb * a_k[:, None]).sum(dim=-1).transpose(1, 2)

            block = decode_block_size(self.decode_block, B, T, self.num_heads * max(self.k_rank, self.v_rank))
            y = factor_attention(logits, cache["a_v"], cache["b_v"], T, offset, block)
        return self.o_proj(y.reshape(B, T, -1)), cache
