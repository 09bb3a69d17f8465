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
