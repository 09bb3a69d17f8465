"""The one small causal LM of paperline: LLaMA-style with pluggable attention, as a `transformers`
model, in one file.

    tokens → embedding → L × [x + attn(RMSNorm(x)),  x + SwiGLU(RMSNorm(x))] → RMSNorm → lm_head

attn is any of `paperline.nn.attention` (MHA, MQA, GQA, MLA, TPA, TPA-KVonly), chosen by
`config.attention`. Defaults as T6 (`model/T6.py`): RMSNorms without a learned gain (`F.rms_norm`),
SwiGLU hidden size ⌊8d/3⌋, the token embedding is the output layer (tied). Weights ~ N(0, 0.02²)
(T6 uses Xavier-uniform on the factor weights; N(0, 0.02²) here for every variant alike — a
simplification). Options for the other users: `norm_gain` (learned RMSNorm gains),
`tie_word_embeddings=False` (a separate lm_head), `zero_init_residual` (the attention output and
MLP down projections start at zero, as T6's c_proj). `llama_config` sets transformers'
LlamaForCausalLM as GaLore trains it (SUMO's C4 pretraining, Influence Distillation's small model).

`CausalLMConfig` / `CausalLM` are registered with AutoConfig / AutoModelForCausalLM under model
type "paperline_causal_lm", so `save_pretrained`, `AutoModelForCausalLM.from_pretrained(<dir>)` and
`generate()` work. The decode cache is our own (`LayerCaches`: per layer the tensors that variant
stores), not a transformers `Cache`: TPA caches factors, MLA latents, which no HF cache holds.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.utils import ModelOutput

from paperline.nn.attention import ATTENTION_VARIANTS, build_attention
from paperline.seeds import seeded_init

MODEL_TYPE = "paperline_causal_lm"


class CausalLMConfig(PretrainedConfig):
    model_type = MODEL_TYPE

    def __init__(self, vocab_size: int = 512, hidden_size: int = 128, num_layers: int = 2,
                 attention: str = "mha", num_heads: int = 4, head_dim: int = 32, num_kv_heads: int = 2,
                 q_rank: int = 6, k_rank: int = 2, v_rank: int = 2, kv_latent_dim: int = 64,
                 q_latent_dim: int = 128, rope_head_dim: int = 16, intermediate_size: int | None = None,
                 max_position_embeddings: int = 1024, rope_base: float = 10000.0, rms_norm_eps: float = 1e-6,
                 init_std: float = 0.02, norm_gain: bool = False, zero_init_residual: bool = False, **kwargs):
        if attention not in ATTENTION_VARIANTS:
            raise ValueError(f"attention {attention!r}: not one of {', '.join(ATTENTION_VARIANTS)}")
        self.vocab_size, self.hidden_size, self.num_layers = vocab_size, hidden_size, num_layers
        self.attention, self.num_heads, self.head_dim, self.num_kv_heads = attention, num_heads, head_dim, num_kv_heads
        self.q_rank, self.k_rank, self.v_rank = q_rank, k_rank, v_rank
        self.kv_latent_dim, self.q_latent_dim, self.rope_head_dim = kv_latent_dim, q_latent_dim, rope_head_dim
        self.intermediate_size = intermediate_size or (8 * hidden_size) // 3
        self.max_position_embeddings, self.rope_base = max_position_embeddings, rope_base
        self.rms_norm_eps, self.init_std = rms_norm_eps, init_std
        # False by default: what every model trained here so far had (see CausalLM._init_weights)
        self.norm_gain, self.zero_init_residual = norm_gain, zero_init_residual
        kwargs.setdefault("tie_word_embeddings", True)
        super().__init__(**kwargs)


class LayerCaches(list):
    """One dict per layer of what its attention caches (time axis dim 1)."""

    @property
    def length(self) -> int:
        return next(iter(self[0].values())).shape[1] if self and self[0] else 0

    def elements_per_token(self) -> float:
        """Cached elements per token per layer (batch 1 equivalent)."""
        if not self.length:
            return 0.0
        total = sum(t.numel() for layer in self for t in layer.values())
        batch = next(iter(self[0].values())).shape[0]
        return total / (len(self) * self.length * batch)


@dataclass
class CausalLMOutput(ModelOutput):
    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    cache: LayerCaches | None = None


class SwiGLU(nn.Module):
    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.gate_proj = nn.Linear(d, hidden, bias=False)
        self.up_proj = nn.Linear(d, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def rms_norm(config: CausalLMConfig) -> nn.RMSNorm:
    """Without a gain (norm_gain False) it holds no parameter and is F.rms_norm(x, eps) exactly."""
    return nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps, elementwise_affine=config.norm_gain)


class Block(nn.Module):
    def __init__(self, config: CausalLMConfig):
        super().__init__()
        self.input_norm = rms_norm(config)
        self.attn = build_attention(config)
        self.post_attention_norm = rms_norm(config)
        self.mlp = SwiGLU(config.hidden_size, config.intermediate_size)

    def forward(self, x: torch.Tensor, offset: int, cache: dict | None):
        y, cache = self.attn(self.input_norm(x), offset, cache)
        x = x + y
        return x + self.mlp(self.post_attention_norm(x)), cache


class CausalLM(PreTrainedModel, GenerationMixin):
    config_class = CausalLMConfig
    base_model_prefix = "model"
    _tied_weights_keys = {"lm_head.weight": "embed_tokens.weight"}

    def __init__(self, config: CausalLMConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.num_layers))
        self.norm = rms_norm(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.zero_init_residual:  # marked on the layer: transformers' init visits each module once
            for name, module in self.named_modules():
                if name.endswith((".o_proj", ".down_proj")):
                    module.zero_init = True
        self.post_init()

    @classmethod
    def seeded(cls, config: CausalLMConfig, generator: torch.Generator) -> "CausalLM":
        """A model whose weights are drawn from `generator` alone, in module order (as transformers'
        init and GaLore's), so runs in threads or on other devices start alike; the global RNG, which
        transformers' init draws from, is left as it was."""
        with seeded_init():
            model = cls(config)
        for module in model.modules():
            model._init_weights(module, generator)
        return model

    @torch.no_grad()
    def _init_weights(self, module: nn.Module, generator: torch.Generator | None = None) -> None:
        # Every weight is drawn, then a zero-start one zeroed: the global RNG stream (and so every other
        # weight) is the same with and without zero_init_residual. Until this option, the zeroing
        # was written on the parent module, which transformers 5 skips (a module without parameters
        # of its own counts as initialized): models trained here had no zero start.
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.normal_(0.0, self.config.init_std, generator=generator)
            if getattr(module, "zero_init", False):
                module.weight.zero_()
        elif isinstance(module, nn.RMSNorm) and module.weight is not None:
            module.weight.fill_(1.0)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    # narrower than transformers' nn.Module: resize_token_embeddings hands it an nn.Embedding
    def set_input_embeddings(self, value: nn.Embedding) -> None:  # type: ignore[override]
        self.embed_tokens = value

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # LayerCaches, not a transformers Cache

    def _blocks(self) -> Iterable[Block]:
        """`self.layers` (nn.ModuleList's stub types its items as any Module; they are Blocks)."""
        return cast("Iterable[Block]", self.layers)

    def attention_parameters(self) -> int:
        return sum(p.numel() for layer in self._blocks() for p in layer.attn.parameters()) // len(self.layers)

    def matrix_parameters(self) -> list[nn.Parameter]:
        """The attention and MLP projection weights: what GaLore's protocol hands the low-rank
        optimizers (its target modules "attn" and "mlp")."""
        # nn.Linear's stub types its weight as a Tensor; it is a Parameter
        return [cast(nn.Parameter, m.weight) for layer in self._blocks() for part in (layer.attn, layer.mlp)
                for m in part.modules() if isinstance(m, nn.Linear)]

    def other_parameters(self) -> list[nn.Parameter]:
        """Embeddings, norm gains and lm_head: the rest, which those protocols train with AdamW."""
        matrices = {id(p) for p in self.matrix_parameters()}
        return [p for p in self.parameters() if id(p) not in matrices]

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None,
                cache: LayerCaches | None = None, use_cache: bool | None = None, **_ignored) -> CausalLMOutput:
        """Logits (B, T, vocab). `labels` (B, T) are the next-token targets of each position
        (already shifted; -100 is ignored). With use_cache, returns the grown LayerCaches."""
        if input_ids.max() >= self.config.vocab_size or input_ids.min() < 0:
            raise ValueError(f"token id {int(input_ids.max())} outside the model's vocabulary of "
                             f"{self.config.vocab_size}: tokenizer and model do not match")
        offset = cache.length if cache is not None else 0
        T = input_ids.shape[1]
        if offset + T > self.config.max_position_embeddings:
            raise ValueError(f"position {offset + T} exceeds max_position_embeddings {self.config.max_position_embeddings}")
        if cache is None and use_cache:
            cache = LayerCaches({} for _ in self.layers)
        logits = self.lm_head(self.hidden_states(input_ids, cache=cache))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
        return CausalLMOutput(loss=loss, logits=logits, cache=cache)

    def hidden_states(self, input_ids: torch.Tensor, num_blocks: int | None = None,
                      cache: LayerCaches | None = None) -> torch.Tensor:
        """(B, T, hidden) after the first `num_blocks` blocks, or after every block and the final
        norm (None); `cache` grows in place. No input checks (`forward` makes them), so it also runs
        under torch.func's vmap and jvp, which allow no branch on tensor values."""
        offset = cache.length if cache is not None else 0
        x = self.embed_tokens(input_ids)
        for i, layer in enumerate(self.layers[:num_blocks]):
            x, layer_cache = layer(x, offset, cache[i] if cache is not None else None)
            if cache is not None:
                cache[i] = layer_cache
        return self.norm(x) if num_blocks is None else x

    def prepare_inputs_for_generation(self, input_ids: torch.Tensor, cache: LayerCaches | None = None,
                                      use_cache: bool | None = True, **_ignored) -> dict:
        if cache is not None and cache.length:
            input_ids = input_ids[:, cache.length:]
        return {"input_ids": input_ids, "cache": cache, "use_cache": use_cache}


def llama_config(hidden_size: int, intermediate_size: int, num_heads: int, num_layers: int, vocab_size: int,
                 max_position_embeddings: int, **kwargs) -> CausalLMConfig:
    """transformers' LlamaForCausalLM as GaLore (`peft_pretraining/modeling_llama.py`) trains it from
    scratch: multi-head attention with RoPE (head size hidden/heads), learned RMSNorm gains, an
    untied lm_head, every weight ~ N(0, 0.02²) with no zero start."""
    return CausalLMConfig(attention="mha", hidden_size=hidden_size, intermediate_size=intermediate_size,
                          num_heads=num_heads, head_dim=hidden_size // num_heads, num_kv_heads=num_heads,
                          num_layers=num_layers, vocab_size=vocab_size,
                          max_position_embeddings=max_position_embeddings, norm_gain=True,
                          tie_word_embeddings=False, zero_init_residual=False, **kwargs)


AutoConfig.register(MODEL_TYPE, CausalLMConfig, exist_ok=True)
AutoModelForCausalLM.register(CausalLMConfig, CausalLM, exist_ok=True)
