"""TPA's exact checks (spec §e): RoPE on the B factors equals RoPE on the materialized Q/K; cached
decoding (FlashTPA for the TPA variants: online softmax over blocks) equals full causal attention
for every variant; TPA with fixed one-hot / group-mask head factors is exactly MHA / GQA;
parameter counts and cache sizes equal Table 1's formulas."""
from __future__ import annotations

import pytest
import torch

from paperline.methods.tpa.formulas import (
    PAPER_SHAPES,
    VARIANTS,
    ShapeConfig,
    attention_params,
    balanced_heads,
    cache_elements_per_token,
    table,
)
from paperline.methods.tpa.models import build_model, lm_config
from paperline.nn.attention import GroupedQueryAttention, MultiHeadAttention, TensorProductAttention, build_attention
from paperline.nn.attention.common import rope_at, rotate
from paperline.nn.attention.tpa import materialize
from paperline.nn.causal_lm import CausalLMConfig

SHAPE = ShapeConfig(d_model=48, num_layers=2, head_dim=8, q_rank=3, k_rank=2, v_rank=2, gqa_kv_heads=2,
                    mla_kv_latent=12, mla_q_latent=20, mla_rope_dim=4)


def _attention(variant: str, shape: ShapeConfig = SHAPE, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    cfg = lm_config(variant, shape, vocab_size=32, max_positions=256)
    for k, v in overrides.items():
        setattr(cfg, k, v)
    module = build_attention(cfg).double()
    for p in module.parameters():  # nonzero everywhere (the model zero-inits o_proj)
        torch.nn.init.normal_(p, 0.0, 0.3)
    return module


def test_rope_on_b_factors_equals_rope_on_materialized_q_and_k():
    module = _attention("tpa")
    x = torch.randn(2, 9, SHAPE.d_model, dtype=torch.float64)
    offset = 5
    f = module.factors(x, offset)  # B_Q, B_K rotated before the product with A
    a_q, b_q = module.q(x)
    a_k, b_k = module.k(x)
    cos, sin = rope_at(offset, 9, SHAPE.head_dim, module.rope_base, x.device, x.dtype)
    for a, b, rotated_b in ((a_q, b_q, f["b_q"]), (a_k, b_k, f["b_k"])):
        expected = rotate(materialize(a, b), cos, sin)  # RoPE applied to the materialized (B, T, h, d_h)
        assert torch.allclose(materialize(a, rotated_b), expected, atol=1e-5, rtol=0)
        assert not torch.allclose(materialize(a, b), expected, atol=1e-3)  # the rotation does something


@pytest.mark.parametrize("decode_block", [3, None])  # several online-softmax blocks; one, sized by budget
@pytest.mark.parametrize("variant", VARIANTS)
def test_cached_decode_equals_full_causal_attention(variant, decode_block):
    module = _attention(variant)
    if hasattr(module, "decode_block"):
        module.decode_block = decode_block
    x = torch.randn(2, 11, SHAPE.d_model, dtype=torch.float64)
    full, _ = module(x)
    prefill, cache = module(x[:, :4], 0, {})
    outs = [prefill]
    two, cache = module(x[:, 4:6], 4, cache)  # a multi-token step against a cache: causal inside it
    outs.append(two)
    for t in range(6, 11):
        y, cache = module(x[:, t:t + 1], t, cache)
        outs.append(y)
    assert torch.allclose(torch.cat(outs, dim=1), full, atol=1e-10, rtol=0)
    per_token = sum(v[0, 0].numel() for v in cache.values())
    assert per_token == module.cache_elements_per_token
    assert per_token == cache_elements_per_token(variant, module.num_heads, SHAPE)
    if variant.startswith("tpa"):  # only the factors are cached, never K or V
        assert sorted(cache) == ["a_k", "a_v", "b_k", "b_v"]


def _tpa_as(reference, q_rank: int, kv_rank: int, q_heads_of_rank, kv_heads_of_rank) -> TensorProductAttention:
    """A non-contextual-A TPA whose B projections are `reference`'s Q/K/V projections."""
    cfg = CausalLMConfig(vocab_size=32, hidden_size=SHAPE.d_model, attention="tpa", num_heads=reference.num_heads,
                         head_dim=SHAPE.head_dim, q_rank=q_rank, k_rank=kv_rank, v_rank=kv_rank)
    tpa = TensorProductAttention(cfg, contextual_a=False).double()
    with torch.no_grad():
        for factor, rank, heads_of_rank, proj in ((tpa.q, q_rank, q_heads_of_rank, reference.q_proj),
                                                  (tpa.k, kv_rank, kv_heads_of_rank, reference.k_proj),
                                                  (tpa.v, kv_rank, kv_heads_of_rank, reference.v_proj)):
            a = torch.zeros(rank, reference.num_heads, dtype=torch.float64)
            for r, heads in enumerate(heads_of_rank):
                a[r, heads] = rank  # scaled: Q = AᵀB / R
            factor.a_const.copy_(a)
            factor.b_proj.weight.copy_(proj.weight)
        tpa.o_proj.weight.copy_(reference.o_proj.weight)
    return tpa


def test_tpa_with_one_hot_head_factors_is_mha():
    mha = _attention("mha")
    h = mha.num_heads
    tpa = _tpa_as(mha, h, h, [[r] for r in range(h)], [[r] for r in range(h)])
    x = torch.randn(2, 7, SHAPE.d_model, dtype=torch.float64)
    assert isinstance(mha, MultiHeadAttention)
    assert torch.allclose(tpa(x)[0], mha(x)[0], atol=1e-12, rtol=0)
    prefill, cache = tpa(x[:, :6], 0, {})  # and through the factor (FlashTPA) decode
    assert torch.allclose(tpa(x[:, 6:], 6, cache)[0], mha(x)[0][:, 6:], atol=1e-12, rtol=0)


def test_tpa_with_group_mask_head_factors_is_gqa():
    shape = SHAPE.model_copy(update={"heads": {"gqa": 6}, "gqa_kv_heads": 3})
    gqa = _attention("gqa", shape)
    h, groups = gqa.num_heads, gqa.num_kv_heads
    assert isinstance(gqa, GroupedQueryAttention) and (h, groups) == (6, 3)
    per_group = h // groups
    tpa = _tpa_as(gqa, h, groups, [[r] for r in range(h)],
                  [list(range(g * per_group, (g + 1) * per_group)) for g in range(groups)])
    x = torch.randn(2, 7, SHAPE.d_model, dtype=torch.float64)
    assert torch.allclose(tpa(x)[0], gqa(x)[0], atol=1e-12, rtol=0)


@pytest.mark.parametrize("shape", [SHAPE, ShapeConfig(), SHAPE.model_copy(update={"heads": {"tpa": 7, "mla": 5}})])
def test_parameter_counts_equal_table_1(shape):
    for variant in VARIANTS:
        model = build_model(variant, shape, vocab_size=64, max_positions=32, seed=0)
        h = balanced_heads(variant, shape)
        assert model.config.num_heads == h
        assert model.attention_parameters() == attention_params(variant, h, shape), variant
        tokens = torch.randint(64, (2, 5))
        cache = model(tokens, use_cache=True).cache
        assert cache.elements_per_token() == cache_elements_per_token(variant, h, shape), variant


def test_mla_normalizes_its_latents_with_eps_1e_6_and_learned_gains():
    # T6's q_a_layernorm / kv_a_layernorm: x = e_0 and a down-projection whose column 0 is 1e-3 give raw
    # latents of 1e-3 in every entry; RMSNorm(eps=1e-6) makes them 1e-3/√(1e-6 + 1e-6) = 1/√2, times
    # the gain (without eps and gains they would be 1).
    module = _attention("mla")
    assert module.q_latent_norm.eps == module.kv_latent_norm.eps == 1e-6
    with torch.no_grad():
        for down, norm, gain in ((module.q_down, module.q_latent_norm, 3.0),
                                 (module.kv_down, module.kv_latent_norm, 2.0)):
            down.weight.zero_()
            down.weight[:, 0] = 1e-3
            norm.weight.fill_(gain)
    latents = []
    module.q_up.register_forward_hook(lambda _m, inputs, _out: latents.append(inputs[0]))
    x = torch.zeros(1, 2, SHAPE.d_model, dtype=torch.float64)
    x[..., 0] = 1.0
    _, cache = module(x, 0, {})
    torch.testing.assert_close(latents[0], torch.full((1, 2, SHAPE.mla_q_latent), 3.0 / 2 ** 0.5, dtype=torch.float64),
                               atol=1e-12, rtol=0)
    torch.testing.assert_close(cache["c_kv"], torch.full((1, 2, SHAPE.mla_kv_latent), 2.0 / 2 ** 0.5,
                                                         dtype=torch.float64), atol=1e-12, rtol=0)


def test_mla_parameters_by_hand_at_the_smoke_shape():
    # d = 128, h = 3, d_h = 32, d'_c = 96, d_c = 64, d_h^R = 16: Table 1's 96·(128 + 96 + 48) + 64·(128 + 192)
    # + 128·(96 + 16) = 26,112 + 20,480 + 14,336 = 60,928, plus the two latent gains 96 + 64 = 61,088
    assert attention_params("mla", 3, ShapeConfig()) == 61_088
    model = build_model("mla", ShapeConfig(), vocab_size=64, max_positions=32, seed=0)
    assert model.attention_parameters() == 61_088


def test_cache_sizes_at_the_papers_configs_are_the_specs_numbers():
    small, medium = table(PAPER_SHAPES["small"]), table(PAPER_SHAPES["medium"])
    cache = {v: r["kv_cache_elements_per_token_per_layer"] for v, r in small.items()}
    assert cache == {"mha": 1536, "mqa": 128, "gqa": 256, "mla": 288, "tpa": 392, "tpa_kvonly": 344}
    assert small["tpa"]["kv_cache_bytes_per_token_bf16"] == 392 * 12 * 2  # 9.4 KB vs MHA's 36.9 KB
    assert small["mha"]["kv_cache_bytes_per_token_bf16"] == 1536 * 12 * 2
    assert [medium[v]["kv_cache_elements_per_token_per_layer"] for v in ("mha", "mla", "tpa")] == [2048, 544, 444]


def test_rebalanced_heads_give_about_4d2_attention_parameters():
    smoke = table(ShapeConfig())
    assert {v: r["heads"] for v, r in smoke.items()} == {"mha": 4, "mqa": 7, "gqa": 6, "mla": 3, "tpa": 5,
                                                        "tpa_kvonly": 6}
    for v, row in smoke.items():
        assert abs(row["attention_params_vs_4d2"] - 1) < 0.1, (v, row)
    # the rule against the paper's h table: medium matches but for MLA; small matches MHA/MQA/GQA and the
    # repo config's MLA n_head = 13, and is one head under the published TPA (34) and TPA-KVonly (22)
    by_rule = {size: {v: balanced_heads(v, ShapeConfig(**(shape.model_dump() | {"heads": None}))) for v in VARIANTS}
               for size, shape in PAPER_SHAPES.items()}
    assert by_rule["small"] == {"mha": 12, "mqa": 23, "gqa": 22, "mla": 13, "tpa": 33, "tpa_kvonly": 21}
    published = PAPER_SHAPES["medium"].heads
    assert {v: h for v, h in by_rule["medium"].items() if v != "mla"} == {v: h for v, h in published.items() if v != "mla"}
