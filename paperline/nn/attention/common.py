"""What the attention variants share: RoPE tables at absolute positions, the cache append, and
materialized causal SDPA with a position offset (a query at position P+i sees keys 0..P+i)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["apply_rotary", "rope_at", "append_cache", "cache_length", "causal_sdpa", "rotary_tables", "rotate"]


def rotary_tables(seq_len: int, head_dim: int, base: float, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin (seq_len, head_dim) of positions 0..seq_len-1, each frequency twice (half-split, as
    transformers' LLaMA)."""
    inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)
    freqs = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each half-pair of the last dim, as transformers' rotate_half."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def rope_at(offset: int, length: int, dim: int, base: float, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin (length, dim) for positions offset .. offset+length-1 (half-split)."""
    cos, sin = rotary_tables(offset + length, dim, base, device, torch.float32)
    return cos[offset:].to(dtype), sin[offset:].to(dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on the last dim of x (B, T, ..., D), cos/sin (T, D): broadcast over the middle dims."""
    shape = (cos.shape[0],) + (1,) * (x.dim() - 3) + (cos.shape[1],)
    return apply_rotary(x, cos.view(shape), sin.view(shape))


def cache_length(cache: dict | None) -> int:
    if not cache:
        return 0
    return next(iter(cache.values())).shape[1]


def append_cache(cache: dict | None, new: dict[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
    """None stays None (no caching); a dict (possibly empty) grows along dim 1."""
    if cache is None:
        return None
    if not cache:
        return dict(new)
    return {k: torch.cat([cache[k], v], dim=1) for k, v in new.items()}


def causal_mask(q_len: int, k_len: int, offset: int, device) -> torch.Tensor:
    """Boolean (q_len, k_len): True where query offset+i may attend key j (j ≤ offset+i)."""
    q_pos = torch.arange(offset, offset + q_len, device=device)[:, None]
    return torch.arange(k_len, device=device)[None, :] <= q_pos


def causal_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offset: int, scale: float | None = None) -> torch.Tensor:
    """q (B, H, Tq, D), k (B, Hk, Tk, D), v (B, Hk, Tk, Dv) with H a multiple of Hk (grouped heads
    share their K/V); queries sit at positions offset..offset+Tq-1 and keys at 0..Tk-1."""
    gqa = k.shape[1] != q.shape[1]  # SDPA shares the K/V heads itself: no h-fold copy of the cache
    q_len, k_len = q.shape[2], k.shape[2]
    if offset == 0 and q_len == k_len:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=gqa)
    if q_len == 1 and offset == k_len - 1:  # one new token: every cached key is in its past
        return F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=gqa)
    mask = causal_mask(q_len, k_len, offset, q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=gqa)
