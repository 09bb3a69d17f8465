"""LLaMA, as the GaLore / SUMO C4 pretraining protocol trains it from scratch (GaLore's
`peft_pretraining/modeling_llama.py`, a copy of transformers 4.28's LlamaForCausalLM), in one file.

    tokens → embedding → N × [x + attn(RMSNorm(x)),  x + mlp(RMSNorm(x))] → RMSNorm → lm_head
    attn: q, k, v, o projections without bias, rotary position embedding (base 10,000), causal
    mlp:  down(silu(gate(x)) · up(x))

Sizes are GaLore's configs/llama_*.json (vocabulary 32,000: the T5 tokenizer's ids of real text).
Weights ~ N(0, 0.02²), norms 1, as transformers' `_init_weights`. Inputs are right-padded: with
causal attention no real token sees a pad, so no attention mask is needed; pad labels are -100.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class LlamaConfig:
    hidden_size: int
    intermediate_size: int
    num_heads: int
    num_layers: int
    vocab_size: int = 32000
    max_seq_len: int = 1024
    rms_norm_eps: float = 1e-6
    rope_base: float = 10000.0


# GaLore's configs/llama_{60m,130m,350m,1b}.json; "tiny" is ours, for tests
LLAMA_SIZES = {
    "tiny": LlamaConfig(hidden_size=32, intermediate_size=64, num_heads=2, num_layers=2, vocab_size=512,
                        max_seq_len=128),
    "60m": LlamaConfig(hidden_size=512, intermediate_size=1376, num_heads=8, num_layers=8),
    "130m": LlamaConfig(hidden_size=768, intermediate_size=2048, num_heads=12, num_layers=12),
    "350m": LlamaConfig(hidden_size=1024, intermediate_size=2736, num_heads=16, num_layers=24),
    "1b": LlamaConfig(hidden_size=2048, intermediate_size=5461, num_heads=32, num_layers=24),
}


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return self.weight * (x.float() * torch.rsqrt(variance + self.eps)).to(x.dtype)


def rotary_tables(seq_len: int, head_dim: int, base: float, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)
    freqs = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (B, H, T, D): rotate each half-pair, as transformers' rotate_half."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.num_heads = cfg.num_heads
        self.head_dim = cfg.hidden_size // cfg.num_heads
        self.q_proj = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=False)
        self.o_proj = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = (proj(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)
                   for proj in (self.q_proj, self.k_proj, self.v_proj))
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.input_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.attn = Attention(cfg)
        self.post_attention_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.input_norm(x), cos, sin)
        return x + self.mlp(self.post_attention_norm(x))


class Llama(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, vocab) of the next token at every position."""
        T = tokens.shape[1]
        if T > self.cfg.max_seq_len:
            raise ValueError(f"sequence length {T} exceeds the model's max_seq_len {self.cfg.max_seq_len}")
        x = self.embed_tokens(tokens)
        cos, sin = rotary_tables(T, self.cfg.hidden_size // self.cfg.num_heads, self.cfg.rope_base,
                                 x.device, x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))

    def matrix_parameters(self) -> list[nn.Parameter]:
        """The attention and MLP projection weights: what GaLore's protocol gives the low-rank
        optimizer (its target modules "attn" and "mlp"); embeddings, norms and lm_head are the rest."""
        return [m.weight for name, m in self.named_modules()
                if isinstance(m, nn.Linear) and (".attn." in f".{name}." or ".mlp." in f".{name}.")]

    def other_parameters(self) -> list[nn.Parameter]:
        matrices = {id(p) for p in self.matrix_parameters()}
        return [p for p in self.parameters() if id(p) not in matrices]


def init_llama(model: Llama, generator: torch.Generator, std: float = 0.02) -> Llama:
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                module.weight.normal_(0.0, std, generator=generator)
            elif isinstance(module, RMSNorm):
                module.weight.fill_(1.0)
    return model


def lm_loss(logits: torch.Tensor, tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Mean next-token cross-entropy over the non-pad targets."""
    targets = tokens[:, 1:].clone()
    targets[targets == pad_id] = -100
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), targets.reshape(-1),
                           ignore_index=-100)
