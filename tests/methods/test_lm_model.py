"""The shared causal LM as a transformers model (Auto classes, save/load, generate with its own
cache) and the shared training loop (learns, resumes a killed run exactly)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from paperline.nn.causal_lm import CausalLM, CausalLMConfig
from paperline.train.lm import LMTrainSettings, lr_at, train_lm


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
