"""The causal LM of each attention variant at a shape: heads from the rebalancing rule, the rest
of the shape shared, so the variants differ only in their attention."""
from __future__ import annotations

from paperline.methods.tpa.formulas import ShapeConfig, balanced_heads
from paperline.nn.causal_lm import CausalLM, CausalLMConfig


def lm_config(variant: str, shape: ShapeConfig, vocab_size: int, max_positions: int) -> CausalLMConfig:
    return CausalLMConfig(vocab_size=vocab_size, hidden_size=shape.d_model, num_layers=shape.num_layers,
                          attention=variant, num_heads=balanced_heads(variant, shape), head_dim=shape.head_dim,
                          num_kv_heads=shape.gqa_kv_heads, q_rank=shape.q_rank, k_rank=shape.k_rank,
                          v_rank=shape.v_rank, kv_latent_dim=shape.mla_kv_latent, q_latent_dim=shape.mla_q_latent,
                          rope_head_dim=shape.mla_rope_dim, max_position_embeddings=max_positions)


def build_model(variant: str, shape: ShapeConfig, vocab_size: int, max_positions: int, seed: int) -> CausalLM:
    from paperline.seeds import seeded_init

    with seeded_init(seed):  # post_init draws the weights from torch's global generator
        return CausalLM(lm_config(variant, shape, vocab_size, max_positions))
