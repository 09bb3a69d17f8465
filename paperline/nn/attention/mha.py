"""Multi-head attention (Vaswani et al. 2017) with RoPE: GQA with one K/V head per query head.
Parameters 4·d·h·d_h; cache 2·h·d_h per token per layer."""
from __future__ import annotations

from paperline.nn.attention.gqa import GroupedQueryAttention


class MultiHeadAttention(GroupedQueryAttention):
    def __init__(self, config):
        super().__init__(config, num_kv_heads=config.num_heads)
