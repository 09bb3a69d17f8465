"""Tensor product attention (Zhang et al. 2025, T6's `model/T6.py` and `model/T6_infer.py`).

Per token, each of Q, K, V is a rank-R sum of outer products of a head factor and a feature factor,
both linear in the hidden state x:

    A_Q = reshape(W_aQ x) (R_Q × h),  B_Q = reshape(W_bQ x) (R_Q × d_h),  Q = A_Qᵀ B_Q / R_Q   (h × d_h)

and the same for K (R_K) and V (R_V). RoPE rotates the rows of B_Q and B_K before the product
(Theorem 3.1: the same as rotating the materialized Q and K). Parameters d(R_Q+R_K+R_V)(h+d_h) +
d·h·d_h. The cache holds only A_K, B̃_K (rotated), A_V, B_V: (R_K+R_V)(h+d_h) per token per layer.

With a cache, attention runs as FlashTPA (Alg. 2) in plain einsums, never materializing K or V:
P = B_Q·B̃_Kᵀ (M × R_Q × R_K), logits = A_Q·A_K weighted by P over the ranks, scaled by
1/(√d_h·R_Q·R_K), an online softmax over blocks of cached tokens, output = Σ p·A_V⊗B_V / R_V.

`contextual_a=False` makes the head factors learned constants (the paper's non-contextual-A
variant): with A = scaled one-hot rows it is exactly MHA, with group masks exactly GQA (§4).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from paperline.nn.attention.common import append_cache, causal_mask, causal_sdpa, rope_at, rotate

# Elements of the largest temporary one online-softmax block may hold: a single-token decode step
# then takes all cached tokens in one block up to long contexts (fewer, larger kernels: on a GPU the
# per-block launches, not the arithmetic, were the cost), while a long prefill against a cache
# still goes block by block.
DECODE_BLOCK_ELEMENTS = 2 ** 26


def decode_block_size(fixed: int | None, batch: int, q_len: int, elements_per_token: int) -> int:
    """Cached tokens per online-softmax block: `fixed` when set (tests), else as many as keep a block's
    temporaries (`elements_per_token` per cached token, query and sequence) under DECODE_BLOCK_ELEMENTS."""
    if fixed:
        return fixed
    return max(1, DECODE_BLOCK_ELEMENTS // (batch * q_len * elements_per_token))


class FactorProjection(nn.Module):
    """x → (A (…, R, h), B (…, R, d_h)): one factor pair of Q, K or V."""

    def __init__(self, d: int, heads: int, head_dim: int, rank: int, contextual_a: bool = True):
        super().__init__()
        self.heads, self.head_dim, self.rank = heads, head_dim, rank
        self.a_proj = nn.Linear(d, rank * heads, bias=False) if contextual_a else None
        self.a_const = None if contextual_a else nn.Parameter(torch.ones(rank, heads))
        self.b_proj = nn.Linear(d, rank * head_dim, bias=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        B, T, _ = x.shape
        if self.a_proj is not None:
            a = self.a_proj(x).view(B, T, self.rank, self.heads)
        else:
            assert self.a_const is not None  # A is a constant where it is not contextual
            a = self.a_const.expand(B, T, self.rank, self.heads)
        return a, self.b_proj(x).view(B, T, self.rank, self.head_dim)


def materialize(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(B, T, R, h), (B, T, R, d_h) → (B, T, h, d_h) = Aᵀ B / R."""
    return torch.einsum("btrh,btrd->bthd", a, b) / a.shape[2]


def factor_attention(logits_fn, a_v: torch.Tensor, b_v: torch.Tensor, q_len: int, offset: int,
                     block: int) -> torch.Tensor:
    """Σ_m softmax_m(logits) · (A_V⊗B_V)_m / R_V with an online softmax over blocks of the M cached
    tokens. logits_fn(start, stop) gives the scaled logits (B, h, q_len, stop-start) of that block.
    Returns (B, q_len, h, d_h)."""
    M = a_v.shape[1]
    running_max: torch.Tensor | None = None
    running_sum: torch.Tensor | None = None
    out: torch.Tensor | None = None
    for start in range(0, M, block):
        stop = min(M, start + block)
        logits = logits_fn(start, stop)
        if q_len > 1:  # several new queries (prefill with a cache): causal inside the block
            mask = causal_mask(q_len, stop, offset, logits.device)[:, start:stop]
            logits = logits.masked_fill(~mask, float("-inf"))
        block_max = logits.amax(dim=-1, keepdim=True)
        new_max = block_max if running_max is None else torch.maximum(running_max, block_max)
        p = torch.exp(logits - new_max)
        p = torch.nan_to_num(p)  # rows of a block entirely in the future: exp(-inf - -inf)
        # weight A_V by the probabilities, then one batched matmul over (m, r) against B_V
        weighted = p.permute(0, 2, 3, 1).unsqueeze(3) * a_v[:, None, start:stop]  # (B, q, m, R_V, h)
        block_out = torch.einsum("bqmrh,bmrd->bqhd", weighted, b_v[:, start:stop])
        block_sum = p.sum(dim=-1)  # (B, h, q)
        if running_max is None:
            out, running_sum = block_out, block_sum
        else:
            assert out is not None and running_sum is not None  # set with running_max by the first block
            correction = torch.exp(running_max - new_max).squeeze(-1)  # (B, h, q)
            out = out * correction.permute(0, 2, 1)[..., None] + block_out
            running_sum = running_sum * correction + block_sum
        running_max = new_max
    assert out is not None and running_sum is not None, "no cached tokens to attend to"
    return out / running_sum.permute(0, 2, 1)[..., None] / a_v.shape[2]


class TensorProductAttention(nn.Module):
    def __init__(self, config, contextual_a: bool = True):
        super().__init__()
        d, h, hd = config.hidden_size, config.num_heads, config.head_dim
        self.num_heads, self.head_dim, self.rope_base = h, hd, config.rope_base
        self.q_rank, self.k_rank, self.v_rank = config.q_rank, config.k_rank, config.v_rank
        self.decode_block: int | None = None  # None: sized by DECODE_BLOCK_ELEMENTS
        self.q = FactorProjection(d, h, hd, self.q_rank, contextual_a)
        self.k = FactorProjection(d, h, hd, self.k_rank, contextual_a)
        self.v = FactorProjection(d, h, hd, self.v_rank, contextual_a)
        self.o_proj = nn.Linear(h * hd, d, bias=False)

    @property
    def cache_elements_per_token(self) -> int:
        return (self.k_rank + self.v_rank) * (self.num_heads + self.head_dim)

    def factors(self, x: torch.Tensor, offset: int) -> dict[str, torch.Tensor]:
        """A_Q, B̃_Q, A_K, B̃_K, A_V, B_V with RoPE applied to the B factors of Q and K."""
        cos, sin = rope_at(offset, x.shape[1], self.head_dim, self.rope_base, x.device, x.dtype)
        a_q, b_q = self.q(x)
        a_k, b_k = self.k(x)
        a_v, b_v = self.v(x)
        return {"a_q": a_q, "b_q": rotate(b_q, cos, sin), "a_k": a_k, "b_k": rotate(b_k, cos, sin),
                "a_v": a_v, "b_v": b_v}

    def forward(self, x: torch.Tensor, offset: int = 0, cache: dict | None = None):
        B, T, _ = x.shape
        f = self.factors(x, offset)
        if not cache:  # training, or a prefill that starts the cache: materialize and use fused SDPA
            q, k, v = (materialize(f[f"a_{n}"], f[f"b_{n}"]).transpose(1, 2) for n in "qkv")
            y = causal_sdpa(q, k, v, offset).transpose(1, 2)
            cache = append_cache(cache, {n: f[n] for n in ("a_k", "b_k", "a_v", "b_v")})
        else:  # decoding against cached factors: FlashTPA, K and V never materialized
            cache = append_cache(cache, {n: f[n] for n in ("a_k", "b_k", "a_v", "b_v")})
            assert cache is not None  # a cache that holds tokens grows
            scale = 1.0 / (math.sqrt(self.head_dim) * self.q_rank * self.k_rank)

            def logits(start: int, stop: int) -> torch.Tensor:
                # Alg. 2 step 1: P over the feature dim, (B, q, M, R_Q, R_K); step 2: weight by A_Q
                # (a matmul over R_Q), then by A_K (a sum over R_K)
                p = torch.einsum("bqrd,bmsd->bqmrs", f["b_q"], cache["b_k"][:, start:stop])
                pa = torch.einsum("bqmrs,bqrh->bqmsh", p, f["a_q"])
                return scale * (pa * cache["a_k"][:, None, start:stop]).sum(dim=3).permute(0, 3, 1, 2)

            h, ranks = self.num_heads, self.q_rank * self.k_rank
            block = decode_block_size(self.decode_block, B, T, ranks + h * max(self.k_rank, self.v_rank))
            y = factor_attention(logits, cache["a_v"], cache["b_v"], T, offset, block)
        return self.o_proj(y.reshape(B, T, -1)), cache
