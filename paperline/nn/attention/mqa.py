"""Multi-query attention (Shazeer 2019): every query head shares one K/V head (TPA's repo: GQA
with one group). Parameters 2·d·d_h·(h+1); cache 2·d_h per token per layer."""
from __future__ import annotations

from paperline.nn.attention.gqa import GroupedQueryAttention


class MultiQueryAttention(GroupedQueryAttention):
    def __init__(self, config):
        super().__init__(config, num_kv_heads=1)
