"""The LM adaptation on a tiny CausalLM directory and corpus the test writes (the real formats: a
transformers model directory, a text-corpus folder, a hash-pinned text slice): every optimizer
trains through peft's LoRA on q/k/v/o and lowers the held-out target loss; the inputs are checked
before training, each refusal naming the path or key."""
from __future__ import annotations

import shutil

import pytest

from paperline.data.text_corpus import prepare_corpus, read_slice
from paperline.methods.altlora.adapters import AdapterError
from paperline.methods.altlora.config import AltLoRAConfig
from paperline.methods.altlora.lm import adapt_lm, lm_data_version
from paperline.train.lm_base import ModelDirError
from tests.conftest import CHECKOUT, two_play_slice

GRID = {"lora_adamw": [3e-3], "lora_sgdm": [0.1], "scaledgd": [0.1], "altlora": [0.1], "altlora_plus": [0.03],
        "lora_pro": [3e-3], "full_ft": [3e-3]}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A 2-layer CausalLM directory, a byte-level corpus of two Shakespeare plays, a KJV copy."""
    from paperline.nn.causal_lm import CausalLM, CausalLMConfig

    root = tmp_path_factory.mktemp("altlora_lm")
    plays = two_play_slice(root / "plays")
    prepare_corpus(read_slice(plays, 6), root / "corpus", kind="byte", vocab_size=256, val_fraction=0.2, seed=0,
                   source={"kind": "test"})
    config = CausalLMConfig(vocab_size=256, hidden_size=32, num_layers=2, num_heads=2, head_dim=16,
                            max_position_embeddings=64)
    CausalLM(config).save_pretrained(root / "base")
    shutil.copytree(CHECKOUT / "data" / "raw" / "kjv", root / "kjv")
    return root


def _cfg(root, **lm) -> AltLoRAConfig:
    return AltLoRAConfig.model_validate({
        "linear": {"lr_grid": GRID},
        "lm": {"base": str(root / "base"), "corpus": str(root / "corpus"), "target_text": str(root / "kjv"),
               "rank": 4, "alpha": 8.0, "block_size": 32, "steps": 12, "batch_size": 4, "warmup_steps": 2,
               "eval_every": 12, "eval_windows": 8, "log_every": 4, "checkpoint_every": 6, "lr_grid": GRID} | lm})


@pytest.mark.parametrize("name", ["lora_adamw", "altlora", "lora_pro", "full_ft"])
def test_each_optimizer_adapts_the_base_to_the_target_text(inputs, name, tmp_path):
    cfg = _cfg(inputs)
    result = adapt_lm(cfg, name, GRID[name][0], "cpu", checkpoint_path=tmp_path / "run.pt")
    assert not result["diverged"]
    assert result["val_loss"] < result["base_target_val_loss"]
    assert result["source_val_loss"] is not None and result["base_source_val_loss"] > 0
    rank, d, layers = 4, 32, 2  # q/k/v/o are 32×32 here
    lora = layers * 4 * 2 * d * rank
    assert result["trainable_params"] == (lora if name != "full_ft" else result["trainable_params"])
    if name in ("lora_adamw", "altlora"):
        assert result["state_floats"] == 2 * lora


def test_a_killed_adaptation_resumes_to_the_same_numbers(inputs, tmp_path, monkeypatch):
    """AltLoRA killed at step 9 resumes from its step-6 checkpoint (the alternation's phase is in the
    param groups, so in the checkpoint) and ends where an uninterrupted run ends."""
    import paperline.methods.altlora.adapters as adapters  # the optimizer factory builds through it

    cfg = _cfg(inputs, dropout=0.0)  # LoRA dropout draws from the global RNG, which no checkpoint keeps
    whole = adapt_lm(cfg, "altlora", 0.1, "cpu", checkpoint_path=tmp_path / "whole.pt")
    make = adapters.make_optimizer

    def dying(*args, **kwargs):
        optimizer = make(*args, **kwargs)
        step, calls = optimizer.step, []

        def step_then_die(*a, **k):
            calls.append(1)
            if len(calls) == 9:
                raise KeyboardInterrupt
            return step(*a, **k)

        optimizer.step = step_then_die
        return optimizer

    monkeypatch.setattr(adapters, "make_optimizer", dying)
    with pytest.raises(KeyboardInterrupt):
        adapt_lm(cfg, "altlora", 0.1, "cpu", checkpoint_path=tmp_path / "killed.pt")
    monkeypatch.setattr(adapters, "make_optimizer", make)
    resumed = adapt_lm(cfg, "altlora", 0.1, "cpu", checkpoint_path=tmp_path / "killed.pt")
    assert resumed["val_loss"] == pytest.approx(whole["val_loss"], rel=1e-6)
    assert resumed["history"]["train_loss"] == pytest.approx(whole["history"]["train_loss"], rel=1e-6)


def test_inputs_are_checked_before_training(inputs, tmp_path):
    assert lm_data_version(_cfg(inputs).lm).startswith("sha256:")
    with pytest.raises(ModelDirError, match=f"{tmp_path}: not a transformers model directory"):
        lm_data_version(_cfg(inputs, base=str(tmp_path)).lm)
    with pytest.raises(AdapterError, match=r"lm.target_modules: 'query' matches no linear layer"):
        lm_data_version(_cfg(inputs, target_modules=["q_proj", "query"]).lm)
    with pytest.raises(AdapterError, match=r"rank 64 is above the width of layer"):
        lm_data_version(_cfg(inputs, rank=64).lm)
    kjv = tmp_path / "kjv"
    shutil.copytree(inputs / "kjv", kjv)
    (kjv / "ruth.txt").write_text("edited\n")
    with pytest.raises(ValueError, match=r"ruth.txt: sha256 .* differs"):
        lm_data_version(_cfg(inputs, target_text=str(kjv)).lm)


def test_two_ddp_processes_adapt_as_one_with_altloras_alternation(inputs, monkeypatch):
    """runtime.distributed over two CPU processes (gloo DDP, spawned by train_lm_spread): AltLoRA's
    optimizer on the LoRA factors is built in each process (OptimizerFactory crosses by pickle),
    and its alternation (every 2 steps here, so both phases run) zeroes the frozen factor's
    gradient instead of flipping its requires_grad, which DDP would not sync. At the same global
    batch (4 windows, 2 per process; no dropout, whose masks are per process) the loss curve is
    the one-process curve within 1e-4 relative (the all-reduce's summation order), and the trained
    factors come back to this process."""
    import numpy as np
    import torch

    import paperline.train.lm_base as lm_base
    from paperline.train.distributed import DistributedConfig

    torch.set_num_threads(1)
    bases = []
    real_load = lm_base.load_causal_lm
    monkeypatch.setattr(lm_base, "load_causal_lm", lambda path: bases.append(real_load(path)) or bases[-1])
    cfg = _cfg(inputs, steps=6, log_every=1, eval_every=3, dropout=0.0)
    cfg = cfg.model_copy(update={"settings": cfg.settings.model_copy(update={"alter_freq": 2})})
    one = adapt_lm(cfg, "altlora", 0.1, "cpu")
    two = adapt_lm(cfg, "altlora", 0.1, "cpu", distributed=DistributedConfig(strategy="ddp", accelerator="cpu",
                                                                            devices=2))
    assert (one["processes"], two["processes"]) == (1, 2)
    assert two["history"]["step"] == one["history"]["step"] == list(range(1, 7))
    np.testing.assert_allclose(two["history"]["train_loss"], one["history"]["train_loss"], rtol=1e-4)
    np.testing.assert_allclose(two["eval_history"]["val_loss"], one["eval_history"]["val_loss"], rtol=1e-4)
    assert two["source_val_loss"] == pytest.approx(one["source_val_loss"], rel=1e-4)
    assert one["val_loss"] < one["base_target_val_loss"]  # it trained
    trained = {k: w for k, w in bases[0].state_dict().items() if "lora_" in k}
    assert trained and any(w.abs().sum() > 0 for k, w in trained.items() if "lora_B" in k)  # B moved off 0
    for name, weight in trained.items():
        torch.testing.assert_close(bases[1].state_dict()[name], weight, rtol=1e-3, atol=1e-5)


def test_a_model_with_its_own_tokenizer_reads_both_texts_in_its_vocabulary(inputs, tmp_path):
    """The paper profile's format: a transformers Llama folder whose vocabulary (300) is not the
    corpus's (256), with its tokenizer.json beside it: the KJV text and the held-out Shakespeare
    speeches are encoded with that tokenizer, and the adaptation lowers the target loss."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from paperline.data.text_corpus import CorpusError, read_slice, train_tokenizer

    folder = tmp_path / "llama"
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=2,
                                 max_position_embeddings=64)).save_pretrained(folder)
    cfg = _cfg(inputs, base=str(folder), source_text=str(inputs / "plays"), steps=8, eval_every=8)
    # the corpus's 256 tokens do not fit a 300-token model: refused, pointing at the missing tokenizer
    with pytest.raises(CorpusError, match=r"does not match the model's vocab_size 300 .*tokenizer.json in"):
        lm_data_version(cfg.lm)
    texts = [d.text for d in read_slice(inputs / "plays", 6)]
    train_tokenizer(texts, "bpe", 300).save(str(folder / "tokenizer.json"))
    assert lm_data_version(cfg.lm).startswith("sha256:")
    result = adapt_lm(cfg, "lora_adamw", 3e-2, "cpu", checkpoint_path=tmp_path / "run.pt")
    assert not result["diverged"] and result["val_loss"] < result["base_target_val_loss"]
    assert result["source_val_loss"] is not None
    train_tokenizer(texts, "bpe", 400).save(str(folder / "tokenizer.json"))  # more tokens than the model has
    with pytest.raises(CorpusError, match=r"tokenizer.json: 400 tokens, more than the model's vocab_size 300"):
        lm_data_version(cfg.lm)
