"""MemDec training: the loss falls towards the kNN targets, the targets must line up with the
tokens, and a run resumed from its checkpoint ends where an uninterrupted one does."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from paperline.methods.memory_decoder.memdec import train_memdec
from paperline.nn.causal_lm import CausalLM, CausalLMConfig
from paperline.train.lm import LMTrainSettings

VOCAB, K = 24, 4


def _model():
    torch.manual_seed(0)
    return CausalLM(CausalLMConfig(vocab_size=VOCAB, hidden_size=16, num_layers=1, num_heads=2, head_dim=8,
                                   max_position_embeddings=16))


def _data():
    tokens = ((np.arange(400) * 7) % VOCAB).astype(np.uint16)  # the next token follows from the current one
    # a kNN target that always favours the true next token and one fixed distractor
    values = np.stack([tokens[1:], np.full(399, 3), tokens[1:], np.full(399, 5)], 1).astype(np.int32)
    weights = np.tile(np.array([0.5, 0.2, 0.2, 0.1], dtype=np.float16), (399, 1))
    return tokens, values, weights


SETTINGS = LMTrainSettings(steps=30, batch_size=8, block_size=16, lr=1e-2, min_lr=1e-3, warmup_steps=2,
                           weight_decay=0.0, log_every=5, checkpoint_every=10)


def test_memdec_training_lowers_the_kl_to_the_knn_targets():
    tokens, values, weights = _data()
    result = train_memdec(_model(), tokens, values, weights, SETTINGS, alpha=0.5, device="cpu")
    kl = result["history"]["kl"]
    assert kl[-1] < 0.8 * kl[0]
    with pytest.raises(ValueError, match="kNN targets"):
        train_memdec(_model(), tokens, values[:-1], weights[:-1], SETTINGS, alpha=0.5, device="cpu")


def test_memdec_trains_without_gradient_clipping():
    # grad_clip None means "no clipping" (LMTrainSettings); it once reached clip_grad_norm_ as max_norm
    tokens, values, weights = _data()
    unclipped = dataclasses.replace(SETTINGS, steps=3, grad_clip=None)
    result = train_memdec(_model(), tokens, values, weights, unclipped, alpha=0.5, device="cpu")
    assert np.isfinite(result["history"]["kl"]).all()


def test_memdec_resumes_from_its_checkpoint(tmp_path):
    tokens, values, weights = _data()
    full = _model()
    ref = train_memdec(full, tokens, values, weights, SETTINGS, 0.5, "cpu", checkpoint_path=tmp_path / "a.pt")
    # a run killed at step 15 (its last checkpoint: step 10), then restarted
    class Killed(Exception):
        pass

    def kill_at_15(step, _metrics):
        if step == 15:
            raise Killed

    with pytest.raises(Killed):
        train_memdec(_model(), tokens, values, weights, SETTINGS, 0.5, "cpu", checkpoint_path=tmp_path / "b.pt",
                     on_log=kill_at_15)
    assert torch.load(tmp_path / "b.pt", weights_only=False)["progress"]["step"] == 10
    resumed = _model()
    out = train_memdec(resumed, tokens, values, weights, SETTINGS, 0.5, "cpu", checkpoint_path=tmp_path / "b.pt")
    assert out["history"]["step"] == ref["history"]["step"]
    for a, b in zip(full.parameters(), resumed.parameters()):
        torch.testing.assert_close(a, b)
