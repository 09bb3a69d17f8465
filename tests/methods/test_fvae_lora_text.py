"""The text modality: speeches of a slice the test writes (with its SHA256SUMS), y = [play in
`positive`], the spurious token over position 0 exactly where a = 1, balanced test groups, and
LoRA / FVAE-LoRA on the q/v projections of a tiny CausalLM saved and reloaded as a model folder."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from paperline.io import DataError
from paperline.methods.fvae_lora.config import FvaeLoraConfig
from paperline.methods.fvae_lora.text import LMFeatures, read_speeches, text_task

LINES = {"comedy": "Sweet music, merry love, and dancing feet! Come, let us sing of joy and wine tonight.",
         "tragedy": "Blood and death and the grave; the king is slain, and sorrow rules this night of woe."}


def _slice(root):
    root.mkdir()
    sums = []
    for play, line in LINES.items():
        text = "\n\n".join(f"SPEAKER {i}. {line} Speech number {i}." for i in range(30)) + "\n"
        (root / f"{play}.txt").write_text(text)
        sums.append(f"{hashlib.sha256(text.encode()).hexdigest()}  {play}.txt")
    (root / "SHA256SUMS").write_text("\n".join(sums) + "\n")


def test_text_task_and_adapters_on_a_tiny_causal_lm(tmp_path):
    from paperline.data.text_corpus import train_tokenizer
    from paperline.methods.fvae_lora.train import adapt
    from paperline.nn.causal_lm import CausalLM, CausalLMConfig

    _slice(tmp_path / "slice")
    tokenizer = train_tokenizer(list(LINES.values()), "byte", 256)
    x, y, plays = read_speeches(tmp_path / "slice", tokenizer, 16, ["comedy"])
    assert x.shape == (60, 16) and x.dtype == np.int64 and y.sum() == 30
    assert all((p == "comedy") == bool(label) for p, label in zip(plays, y))
    with pytest.raises(DataError, match=r"text.positive: \['farce'\] not among the plays"):
        read_speeches(tmp_path / "slice", tokenizer, 16, ["farce"])

    task = text_task(x, y, spurious_token=255, agreement=0.9, train_fraction=0.5, seed=1)
    for rows, a in ((task.train_x, task.train_a), (task.test_x, task.test_a)):
        assert np.array_equal(rows[:, 0] == 255, a == 1)  # no speech of the slice starts with byte 255
    assert len({int(((task.test_y == gy) & (task.test_a == ga)).sum()) for gy in (0, 1) for ga in (0, 1)}) == 1

    torch.manual_seed(0)
    CausalLM(CausalLMConfig(vocab_size=256, hidden_size=16, num_layers=1, num_heads=2, head_dim=8)).save_pretrained(
        tmp_path / "lm")
    lm = CausalLM.from_pretrained(tmp_path / "lm", local_files_only=True)
    backbone = LMFeatures(lm)
    cfg = FvaeLoraConfig(variants=["lora", "fvae_lora"], seeds=[1],
                         adapter={"rank": 2, "alpha": 2, "target_modules": ["q_proj", "v_proj"]},
                         fvae={"encoder_hidden": 2, "decoder_hidden": 4}, train={"epochs": 1, "batch_size": 8})
    for v in cfg.variants:
        out = adapt(cfg, v, backbone, task, 1)
        assert 0 <= out["metrics"]["worst_group_accuracy"] <= out["metrics"]["accuracy"] <= 1
    # the adapters sit on every layer's q and v projections: 2 per layer, (16 + 16)·2 LoRA weights each
    assert adapt(cfg, "lora", backbone, task, 1)["metrics"]["trainable_parameters"] == 2 * 64 + 16 * 2 + 2


def test_the_subsample_is_balanced_and_the_spurious_token_starts_no_speech():
    from paperline.methods.fvae_lora.text import balanced_subsample, pick_spurious_token

    y = np.array([0] * 30 + [1] * 7)
    keep = balanced_subsample(y, 20, seed=0)
    assert (y[keep] == 0).sum() == 10 and (y[keep] == 1).sum() == 7 and np.all(np.diff(keep) > 0)
    assert np.array_equal(balanced_subsample(y, None, 0), np.arange(37))
    tokens = np.array([[9, 1], [8, 2], [3, 3]])
    assert pick_spurious_token(tokens, 10, None) == 7  # the highest id no row starts with
    with pytest.raises(DataError, match="text.spurious_token: 8 already starts 1 speeches"):
        pick_spurious_token(tokens, 10, 8)
    with pytest.raises(DataError, match=r"text.spurious_token: 10 is outside the model's vocabulary \(0..9\)"):
        pick_spurious_token(tokens, 10, 10)


def test_prepare_text_refuses_a_folder_that_is_not_a_causal_lm_before_training(tmp_path):
    from paperline.methods.fvae_lora.config import TextConfig
    from paperline.methods.fvae_lora.text import prepare_text
    from paperline.train.lm_base import ModelDirError

    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelDirError, match=f"{tmp_path / 'empty'}: not a transformers model directory"):
        prepare_text(TextConfig(base=str(tmp_path / "empty")), 0)
    from paperline.nn.causal_lm import CausalLM, CausalLMConfig

    CausalLM(CausalLMConfig(vocab_size=64, hidden_size=16, num_layers=1, num_heads=2, head_dim=8,
                            max_position_embeddings=8)).save_pretrained(tmp_path / "lm")
    with pytest.raises(ValueError, match="text.adapter.target_modules: 'query' matches no nn.Linear"):
        prepare_text(TextConfig(base=str(tmp_path / "lm"), adapter={"target_modules": ["query"]}), 0)
    with pytest.raises(ValueError, match="rank 17 is above the width 16"):
        prepare_text(TextConfig(base=str(tmp_path / "lm"), adapter={"rank": 17}), 0)
    with pytest.raises(DataError, match="text.length: 16 tokens exceed .* context of 8"):
        prepare_text(TextConfig(base=str(tmp_path / "lm")), 0)


def test_a_llama_folder_with_its_own_tokenizer_reads_the_speeches_in_its_vocabulary(tmp_path):
    """The paper profile's format: a transformers Llama folder (vocabulary 300, not the corpus's)
    with its tokenizer.json: prepare_text encodes the speeches with it; a tokenizer larger than the
    model is refused naming the file."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from paperline.data.text_corpus import train_tokenizer
    from paperline.methods.fvae_lora.config import TextConfig
    from paperline.methods.fvae_lora.text import prepare_text

    _slice(tmp_path / "slice")
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=300, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=2,
                                 max_position_embeddings=32)).save_pretrained(tmp_path / "llama")
    tokenizer = train_tokenizer(list(LINES.values()), "bpe", 290)
    tokenizer.save(str(tmp_path / "llama" / "tokenizer.json"))
    cfg = TextConfig(base=str(tmp_path / "llama"), corpus=str(tmp_path / "no_corpus"), speeches=str(tmp_path / "slice"),
                     positive=["comedy"], length=8)
    data = prepare_text(cfg, 0)
    first = tokenizer.encode(f"SPEAKER 0. {LINES['comedy']} Speech number 0.").ids[:8]
    assert data.tokens.shape == (60, 8) and first in data.tokens.tolist() and data.spurious_token < 300
    train_tokenizer(list(LINES.values()), "bpe", 400).save(str(tmp_path / "llama" / "tokenizer.json"))
    with pytest.raises(DataError, match=r"tokenizer.json: \d+ tokens, more than the model's vocab_size 300"):
        prepare_text(cfg, 0)
