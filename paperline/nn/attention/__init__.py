"""Pluggable causal self-attention for `paperline.nn.causal_lm`: one small module per variant.

Every variant maps (x, position offset, cache) → (y, cache): `cache` is a dict of tensors with the
time axis at dim 1 (what the variant stores per token), grown by `append_cache`; `None` means full
causal attention without a cache. `cache_elements_per_token` is what a variant stores per token per
layer, which the tests check against the formulas of TPA's Table 1 (`paperline.methods.tpa.formulas`).
"""
from __future__ import annotations

from paperline.nn.attention.gqa import GroupedQueryAttention
from paperline.nn.attention.mha import MultiHeadAttention
from paperline.nn.attention.mla import MultiHeadLatentAttention
from paperline.nn.attention.mqa import MultiQueryAttention
from paperline.nn.attention.tpa import TensorProductAttention
from paperline.nn.attention.tpa_kvonly import TensorProductAttentionKVOnly

ATTENTION_VARIANTS = {
    "mha": MultiHeadAttention,
    "mqa": MultiQueryAttention,
    "gqa": GroupedQueryAttention,
    "mla": MultiHeadLatentAttention,
    "tpa": TensorProductAttention,
    "tpa_kvonly": TensorProductAttentionKVOnly,
}


def build_attention(config):
    try:
        cls = ATTENTION_VARIANTS[config.attention]
    except KeyError:
        raise ValueError(f"attention {config.attention!r}: not one of {', '.join(ATTENTION_VARIANTS)}") from None
    return cls(config)


__all__ = ["ATTENTION_VARIANTS", "build_attention", "GroupedQueryAttention", "MultiHeadAttention",
           "MultiHeadLatentAttention", "MultiQueryAttention", "TensorProductAttention",
           "TensorProductAttentionKVOnly"]
