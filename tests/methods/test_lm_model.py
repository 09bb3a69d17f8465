"""The shared causal LM as a transformers model (Auto classes, save/load, generate with its own
cache), its options (GaLore's LLaMA: learned norm gains, an untied head; the zero start), and the
shared training loop (learns, resumes a killed run exactly, trains with another optimizer, in
micro-batches, stops on divergence)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from paperline.nn.causal_lm import CausalLM, CausalLMConfig, llama_config
from paperline.train.lm import LMTrainSettings, lr_at, make_optimizer, train_lm


def _model(attention: str = "tpa", seed: int = 0, vocab: int = 40) -> CausalLM:
    torch.manual_seed(seed)
    model = CausalLM(CausalLMConfig(vocab_size=vocab, hidden_size=32, num_layers=2, attention=attention, num_heads=4,
                                    head_dim=8, num_kv_heads=2, q_rank=3, k_rank=2, v_rank=2, kv_latent_dim=12,
                                    q_latent_dim=16, rope_head_dim=4, max_position_embeddings=64))
    with torch.no_grad():  # leave the zero init so outputs depend on every weight
        for p in model.parameters():
            p.normal_(0.0, 0.2)
    return model.eval()


@pytest.mark.parametrize("attention", ["mha", "mla", "tpa"])
def test_save_pretrained_and_auto_from_pretrained_round_trip(tmp_path, attention):
    model = _model(attention)
    model.save_pretrained(tmp_path / "hf")
    assert AutoConfig.from_pretrained(tmp_path / "hf").attention == attention
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    assert type(loaded) is CausalLM
    assert loaded.lm_head.weight.data_ptr() == loaded.embed_tokens.weight.data_ptr()  # tied embeddings
    tokens = torch.randint(40, (2, 12))
    with torch.no_grad():
        assert torch.equal(loaded(tokens).logits, model(tokens).logits)


@pytest.mark.parametrize("attention", ["gqa", "tpa", "tpa_kvonly"])
def test_generate_with_the_cache_equals_greedy_decoding_without_it(attention):
    model = _model(attention)
    prompt = torch.randint(40, (2, 5))
    seen = []
    hook = model.embed_tokens.register_forward_hook(lambda module, args, out: seen.append(args[0].shape[1]))
    generated = model.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=0)
    hook.remove()
    assert seen == [5] + [1] * 7  # the prompt once, then one new token per step against the cache
    tokens = prompt
    with torch.no_grad():
        for _ in range(8):  # full recompute each step, no cache
            tokens = torch.cat([tokens, model(tokens).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(generated, tokens)


def _tokens(n: int = 4000, vocab: int = 40) -> np.ndarray:
    """A learnable sequence: a noisy cycle through the vocabulary."""
    rng = np.random.default_rng(0)
    seq = (np.arange(n) * 7 + (rng.random(n) < 0.1) * rng.integers(0, vocab, n)) % vocab
    return seq.astype(np.uint16)


SETTINGS = LMTrainSettings(steps=8, batch_size=4, block_size=16, lr=1e-2, min_lr=1e-3, warmup_steps=2, eval_every=4,
                           eval_windows=8, log_every=2, checkpoint_every=4, seed=3)


def test_training_learns_and_a_killed_run_resumes_exactly(tmp_path):
    assert lr_at(0, SETTINGS) == pytest.approx(5e-3) and lr_at(8, SETTINGS) == pytest.approx(1e-3)
    data = _tokens()
    straight = train_lm(_model("tpa", 1), data, data[:800], SETTINGS, "cpu", checkpoint_path=tmp_path / "a.pt")
    assert straight["eval_history"]["val_loss"][-1] < straight["eval_history"]["val_loss"][0]
    assert straight["val_perplexity"] == pytest.approx(np.exp(straight["val_loss"]))

    def die_after_checkpoint(step, metrics):
        if step == 6:
            raise KeyboardInterrupt("killed")

    with pytest.raises(KeyboardInterrupt):
        train_lm(_model("tpa", 1), data, data[:800], SETTINGS, "cpu", checkpoint_path=tmp_path / "b.pt",
                 on_log=die_after_checkpoint)
    resumed_model = _model("tpa", 1)
    resumed = train_lm(resumed_model, data, data[:800], SETTINGS, "cpu", checkpoint_path=tmp_path / "b.pt")
    assert resumed["history"] == straight["history"] and resumed["val_loss"] == straight["val_loss"]
    # another configuration never resumes from this checkpoint
    with pytest.warns(UserWarning, match="another configuration"):
        train_lm(_model("tpa", 1), data, data[:800], SETTINGS.__class__(**{**SETTINGS.__dict__, "lr": 2e-2}), "cpu",
                 checkpoint_path=tmp_path / "b.pt")


# ---------------------------------------------------------------- the options other users need

def _tiny_llama(seed: int = 0) -> CausalLM:
    return CausalLM.seeded(llama_config(hidden_size=32, intermediate_size=64, num_heads=4, num_layers=2,
                                        vocab_size=40, max_position_embeddings=64),
                           torch.Generator().manual_seed(seed))


def test_the_default_model_has_no_norm_gains_a_tied_head_and_no_zero_start():
    model = _model("mha")
    assert not [name for name in model.state_dict() if "norm" in name]  # the checkpoints' keys as before
    assert model.lm_head.weight is model.embed_tokens.weight
    torch.manual_seed(0)
    fresh = CausalLM(CausalLMConfig(vocab_size=40, hidden_size=32, num_layers=1, num_heads=4, head_dim=8))
    assert fresh.layers[0].attn.o_proj.weight.abs().sum() > 0  # what every model trained so far had


def test_zero_init_residual_zeroes_only_the_residual_projections():
    def build(zero: bool) -> CausalLM:
        torch.manual_seed(0)
        return CausalLM(CausalLMConfig(vocab_size=40, hidden_size=32, num_layers=2, num_heads=4, head_dim=8,
                                       zero_init_residual=zero))

    plain, zeroed = build(False).state_dict(), build(True).state_dict()
    residual = [k for k in plain if k.endswith(("o_proj.weight", "down_proj.weight"))]
    assert len(residual) == 4 and all(not zeroed[k].any() for k in residual)
    assert all(torch.equal(plain[k], zeroed[k]) for k in plain if k not in residual)  # the same RNG stream


def test_a_galore_llama_has_learned_norm_gains_and_an_untied_head():
    model = _tiny_llama()
    gains = [name for name, _ in model.named_parameters() if "norm" in name]
    assert len(gains) == 2 * 2 + 1 and all(torch.equal(model.state_dict()[n], torch.ones(32)) for n in gains)
    assert model.lm_head.weight is not model.embed_tokens.weight
    assert not torch.equal(model.lm_head.weight, model.embed_tokens.weight)
    assert len(model.matrix_parameters()) == 7 * 2 and len(model.other_parameters()) == 2 + len(gains)


def test_a_galore_llama_computes_what_transformers_llama_does_with_the_same_weights():
    from transformers import LlamaConfig, LlamaForCausalLM

    ours = _tiny_llama().eval()
    hf = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4,
                                      num_key_value_heads=4, num_hidden_layers=2, vocab_size=40,
                                      max_position_embeddings=64, rms_norm_eps=1e-6,
                                      tie_word_embeddings=False)).eval()
    with torch.no_grad():  # gains that are not all ones, so they count
        for name, p in ours.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)

    def hf_name(name: str) -> str:
        name = (name.replace(".attn.", ".self_attn.").replace(".input_norm.", ".input_layernorm.")
                .replace(".post_attention_norm.", ".post_attention_layernorm."))
        return name if name.startswith("lm_head.") else "model." + name

    hf.load_state_dict({hf_name(k): v for k, v in ours.state_dict().items()}, strict=True)
    tokens = torch.randint(40, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(ours(tokens).logits, hf(tokens).logits, rtol=1e-5, atol=1e-5)


def test_a_seeded_model_depends_on_its_generator_alone():
    torch.manual_seed(7)
    before = torch.get_rng_state()
    a = _tiny_llama(3)
    assert torch.equal(torch.get_rng_state(), before)  # transformers' own init left no trace
    torch.manual_seed(8)
    b = _tiny_llama(3)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert not torch.equal(_tiny_llama(4).embed_tokens.weight, a.embed_tokens.weight)


def test_hidden_states_of_the_first_blocks_and_of_the_last():
    model = _tiny_llama()
    tokens = torch.randint(40, (2, 10), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        x = model.embed_tokens(tokens)
        x, _ = model.layers[0](x, 0, None)
        torch.testing.assert_close(model.hidden_states(tokens, 1), x)
        torch.testing.assert_close(model.lm_head(model.hidden_states(tokens)), model(tokens).logits)


# ---------------------------------------------------------------- train_lm for other optimizers

def test_train_lm_with_an_optimizer_factory_schedules_each_group_from_its_own_lr():
    data = _tokens()
    default = train_lm(_model("mha", 1), data, data[:800], SETTINGS, "cpu")
    same = train_lm(_model("mha", 1), data, data[:800], SETTINGS, "cpu",
                    optimizer_factory=lambda m: make_optimizer(m, SETTINGS))
    assert same["history"] == default["history"] and same["val_loss"] == default["val_loss"]

    seen = []

    class RecordingSGD(torch.optim.SGD):
        def step(self, closure=None):
            seen.append([g["lr"] for g in self.param_groups])
            return super().step(closure)

    def two_lrs(model):  # the second group starts at a tenth of the lr (as SUMO's AdamW part may)
        params = list(model.parameters())
        return RecordingSGD([{"params": params[:3]}, {"params": params[3:], "lr": SETTINGS.lr / 10}], lr=SETTINGS.lr)

    result = train_lm(_model("mha", 1), data, data[:800], SETTINGS, "cpu", optimizer_factory=two_lrs)
    assert result["history"]["train_loss"] != default["history"]["train_loss"]  # another optimizer trained
    for step, (lr, tenth) in enumerate(seen):
        assert lr == lr_at(step, SETTINGS) and tenth == pytest.approx(lr_at(step, SETTINGS) / 10, rel=1e-12)


def test_micro_batches_accumulate_to_the_whole_batch_step():
    data = _tokens()
    whole = _model("mha", 1)
    train_lm(whole, data, data[:800], SETTINGS, "cpu")
    sliced = _model("mha", 1)
    half = SETTINGS.__class__(**{**SETTINGS.__dict__, "batch_size": SETTINGS.batch_size // 2, "micro_batches": 2})
    result = train_lm(sliced, data, data[:800], half, "cpu")
    for a, b in zip(whole.parameters(), sliced.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)  # float rounding through Adam
    assert result["tokens_seen"] == SETTINGS.steps * SETTINGS.batch_size * SETTINGS.block_size


def test_a_diverging_run_raises_or_with_stop_on_divergence_ends_diverged():
    data = _tokens()
    settings = SETTINGS.__class__(**{**SETTINGS.__dict__, "grad_clip": None, "warmup_steps": 0})

    def exploding(model):
        return torch.optim.SGD(model.parameters(), lr=1e25)

    with pytest.raises(FloatingPointError, match="training loss is"):
        train_lm(_model("mha", 1), data, data[:800], settings, "cpu", optimizer_factory=exploding)
    result = train_lm(_model("mha", 1), data, data[:800], settings, "cpu", optimizer_factory=exploding,
                      stop_on_divergence=True)
    assert result["diverged"] and result["val_loss"] is None and 1 < result["steps"] < settings.steps
