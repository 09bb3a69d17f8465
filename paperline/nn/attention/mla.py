"""Multi-head latent attention (DeepSeek-V2), as TPA's baseline `model/llama-mla.py` counts it:

    queries:  c_q = W_DQ x (d'_c),  q_C = W_UQ c_q (h × d_h),  q_R = RoPE(W_QR c_q) (h × d_h^R)
    keys:     c_kv = W_DKV x (d_c), k_C = W_UK c_kv (h × d_h), k_R = RoPE(W_KR x) (d_h^R, shared by heads)
    values:   v = W_UV c_kv (h × d_h);  score_h = [q_C, q_R]_h · [k_C, k_R]_h / √(d_h + d_h^R)

The latents c_q and c_kv are RMS-normalized with eps 1e-6 and a learned gain, as T6's
`q_a_layernorm` / `kv_a_layernorm` (and DeepSeek-V2) do. Parameters d'_c(d + h·d_h + h·d_h^R) +
d_c(d + 2h·d_h) + d(h·d_h + d_h^R) (Table 1) + d'_c + d_c (the two gains, which Table 1 leaves out);
the cache holds the normalized c_kv and the rotated k_R: d_c + d_h^R per token per layer. Decoding
up-projects the cached latents (the weight-absorption trick is a speed-up, not needed for
exactness)."""
from __future__ import annotations

import math

import torch
from torch import nn

from paperline.nn.attention.common import append_cache, causal_sdpa, rope_at, rotate

LATENT_NORM_EPS = 1e-6  # T6's RMSNorm default, whatever the model's own norms use


class MultiHeadLatentAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        d, h, hd = config.hidden_size, config.num_heads, config.head_dim
        self.num_heads, self.head_dim, self.rope_base = h, hd, config.rope_base
        self.q_latent_dim, self.kv_latent_dim = config.q_latent_dim, config.kv_latent_dim
        self.rope_dim = config.rope_head_dim
        self.q_down = nn.Linear(d, self.q_latent_dim, bias=False)
        self.q_latent_norm = nn.RMSNorm(self.q_latent_dim, eps=LATENT_NORM_EPS)
        self.q_up = nn.Linear(self.q_latent_dim, h * hd, bias=False)
        self.q_rope = nn.Linear(self.q_latent_dim, h * self.rope_dim, bias=False)
        self.kv_down = nn.Linear(d, self.kv_latent_dim, bias=False)
        self.kv_latent_norm = nn.RMSNorm(self.kv_latent_dim, eps=LATENT_NORM_EPS)
        self.k_up = nn.Linear(self.kv_latent_dim, h * hd, bias=False)
        self.v_up = nn.Linear(self.kv_latent_dim, h * hd, bias=False)
        self.k_rope = nn.Linear(d, self.rope_dim, bias=False)
        self.o_proj = nn.Linear(h * hd, d, bias=False)

    @property
    def cache_elements_per_token(self) -> int:
        return self.kv_latent_dim + self.rope_dim

    def forward(self, x: torch.Tensor, offset: int = 0, cache: dict | None = None):
        B, T, _ = x.shape
        h, hd = self.num_heads, self.head_dim
        cos, sin = rope_at(offset, T, self.rope_dim, self.rope_base, x.device, x.dtype)
        c_q = self.q_latent_norm(self.q_down(x))
        q = torch.cat([self.q_up(c_q).view(B, T, h, hd),
                       rotate(self.q_rope(c_q).view(B, T, h, self.rope_dim), cos, sin)], dim=-1)
        c_kv = self.kv_latent_norm(self.kv_down(x))
        k_r = rotate(self.k_rope(x).view(B, T, 1, self.rope_dim), cos, sin).squeeze(2)
        cache = append_cache(cache, {"c_kv": c_kv, "k_rope": k_r})
        if cache is not None:
            c_kv, k_r = cache["c_kv"], cache["k_rope"]
        S = c_kv.shape[1]
        k = torch.cat([self.k_up(c_kv).view(B, S, h, hd), k_r[:, :, None, :].expand(B, S, h, self.rope_dim)], dim=-1)
        v = self.v_up(c_kv).view(B, S, h, hd)
        y = causal_sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), offset,
                        scale=1.0 / math.sqrt(hd + self.rope_dim))
        return self.o_proj(y.transpose(1, 2).reshape(B, T, -1)), cache
