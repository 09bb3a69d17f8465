"""The paper profile's path, LLaMA on C4 by path, on small files in the exact C4 format with a
tokenizer trained here: loader errors name the file, tokenization as GaLore's, the LLaMA is causal
and has GaLore's sizes, training runs for each optimizer and resumes to the same result."""
from __future__ import annotations

import gzip
import math

import pytest
import torch

from paperline.data.c4 import (C4Tokenizer, c4_shards, read_documents, train_batches, write_c4_shard,
                               write_word_level_tokenizer)
from paperline.methods.sumo.config import SumoConfig
from paperline.methods.sumo.lm import llama_step_times, train_lm
from paperline.nn.llama import LLAMA_SIZES, Llama, init_llama


WORDS = "the a model learns low rank moment subspace optimizer gradient step loss".split()
CPU = torch.device("cpu")


def _texts(n: int, seed: int) -> list[str]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):  # a learnable structure: each word is followed by the next in WORDS
        start = int(torch.randint(len(WORDS), (1,), generator=gen))
        length = int(torch.randint(5, 30, (1,), generator=gen))
        out.append(" ".join(WORDS[(start + i) % len(WORDS)] for i in range(length)))
    return out


@pytest.fixture(scope="module")
def c4(tmp_path_factory):
    root = tmp_path_factory.mktemp("c4")
    texts = _texts(400, 0)
    write_c4_shard(root / "c4-train.00000-of-01024.json.gz", texts[:200])
    write_c4_shard(root / "c4-train.00001-of-01024.json.gz", texts[200:])
    write_c4_shard(root / "c4-validation.00000-of-00008.json.gz", _texts(60, 1))
    return root, str(write_word_level_tokenizer(root / "tokenizer.json", texts))


def _cfg(c4, **kw) -> SumoConfig:
    root, tokenizer = c4
    base = dict(task="llama_c4", optimizers=["adamw", "galore_adamw", "muon", "sumo", "sumo_ns"],
                lr_grid={"adamw": [3e-3], "galore_adamw": [3e-2], "muon": [0.02], "sumo": [0.1], "sumo_ns": [0.1]},
                seeds=1, steps=12, batch_size=16, rank=4, update_period=5, adamw_part_lr=None, log_every=2,
                checkpoint_every=4, timing_rounds=1, timing_steps=2,
                lm=dict(model_size="tiny", c4_dir=str(root), tokenizer=tokenizer, max_length=32,
                        micro_batch_size=8, dtype="float32", eval_every=6, eval_tokens=500, shuffle_buffer=50))
    return SumoConfig(**(base | kw))


def test_c4_loader_reads_the_format_and_names_bad_files(c4, tmp_path):
    root, _ = c4
    assert [p.name for p in c4_shards(root, "validation")] == ["c4-validation.00000-of-00008.json.gz"]
    assert len(list(read_documents(c4_shards(root, "train")[0]))) == 200
    with pytest.raises(FileNotFoundError, match="no c4-train.*shards"):
        c4_shards(tmp_path, "train")
    with pytest.raises(FileNotFoundError, match="no such C4 folder"):
        c4_shards(tmp_path / "absent", "train")
    bad = tmp_path / "c4-train.00000-of-01024.json.gz"
    with gzip.open(bad, "wt") as fh:
        fh.write('{"text": "fine"}\n{"url": "no text"}\n')
    with pytest.raises(ValueError, match=r"c4-train.00000-of-01024.json.gz: line 2: expected a JSON object"):
        list(read_documents(bad))


def test_tokenization_truncates_pads_and_ends_with_eos(c4, tmp_path):
    _, path = c4
    tok = C4Tokenizer(path, max_length=8)
    ids = tok(["the a model", " ".join(WORDS * 3)])
    assert ids.shape == (2, 8) and tok.pad_id == 0
    assert ids[0, 3] == 1 and (ids[0, 4:] == 0).all()  # 3 words, </s>, pads
    assert ids[1, -1] == 1 and (ids[1] != 0).all()  # truncated, </s> kept
    with pytest.raises(ValueError, match="outside the model's vocabulary of 4"):
        C4Tokenizer(path, 8, vocab_size=4)(["optimizer gradient"])
    with pytest.raises(FileNotFoundError, match="no such tokenizer file"):
        C4Tokenizer(tmp_path / "none.json", 8)


def test_train_stream_is_seeded_and_skips_exactly(c4):
    root, path = c4
    tok = C4Tokenizer(path, 16)
    first = train_batches(root, tok, 4, seed=42, buffer_size=50)
    batches = [next(first) for _ in range(5)]
    skipped = train_batches(root, tok, 4, seed=42, buffer_size=50, skip_batches=3)
    assert torch.equal(next(skipped), batches[3])
    other = next(train_batches(root, tok, 4, seed=7, buffer_size=50))
    assert not torch.equal(other, batches[0])


def test_llama_is_causal_and_has_galore_sizes():
    model = init_llama(Llama(LLAMA_SIZES["tiny"]), torch.Generator().manual_seed(0))
    tokens = torch.randint(0, 512, (2, 10), generator=torch.Generator().manual_seed(1))
    changed = tokens.clone()
    changed[:, 6:] = 3
    torch.testing.assert_close(model(tokens)[:, :6], model(changed)[:, :6])
    assert len(model.matrix_parameters()) == 7 * 2  # q, k, v, o, gate, up, down per layer
    with torch.device("meta"):
        sizes = {name: sum(p.numel() for p in Llama(LLAMA_SIZES[name]).parameters()) / 1e6
                 for name in ("60m", "130m", "350m", "1b")}
    assert 55 < sizes["60m"] < 62 and 125 < sizes["130m"] < 140 and 340 < sizes["350m"] < 375
    assert 1200 < sizes["1b"] < 1400  # LLaMA-1B of GaLore: 1.34B with the untied head


@pytest.mark.parametrize("name", ["adamw", "galore_adamw", "muon", "sumo", "sumo_ns"])
def test_every_optimizer_pretrains_the_tiny_llama(c4, name):
    cfg = _cfg(c4)
    result = train_lm(cfg, name, cfg.lr_grid[name][0], 0, CPU)
    losses = result["history"]["train_loss"]
    assert not result["diverged"] and losses[-1] < losses[0]
    assert result["eval_history"]["step"] == [6, 12] and math.isfinite(result["val_perplexity"])
    assert result["state_floats"] == result["state_floats_formula"]
    assert result["tokens_seen"] > 0


def test_a_stopped_pretraining_run_resumes_to_the_same_result(c4, tmp_path):
    cfg = _cfg(c4, steps=8)
    clean = train_lm(cfg, "sumo", 0.1, 0, CPU)
    path = tmp_path / "seed0.pt"
    assert train_lm(cfg, "sumo", 0.1, 0, CPU, checkpoint_path=path, stop_after=5) == {}
    resumed = train_lm(cfg, "sumo", 0.1, 0, CPU, checkpoint_path=path)
    assert resumed["history"] == clean["history"] and resumed["final_test_loss"] == clean["final_test_loss"]


def test_bf16_training_keeps_low_rank_state_in_bf16(c4):
    cfg = _cfg(c4, steps=2, lm=_cfg(c4).lm.model_copy(update={"dtype": "bfloat16"}))
    result = train_lm(cfg, "sumo", 0.1, 0, CPU)
    assert result["state_bytes"] == 2 * result["state_floats"] == 2 * result["state_floats_formula"]


def test_step_times_on_the_llama(c4):
    times = llama_step_times(_cfg(c4), CPU)
    assert times["adamw"]["step_time_vs_adamw"] == 1.0 and times["sumo"]["state_bytes_vs_adamw"] < 1


@pytest.mark.parametrize("change, message", [
    (dict(lm=None), "task llama_c4 needs the lm block"),
    (dict(rank=64), "rank 64 is larger than LLaMA-tiny's hidden size 32"),
    (dict(batch_size=12), "batch_size 12 is not a multiple of lm.micro_batch_size 8"),
])
def test_invalid_lm_parameters(c4, change, message):
    with pytest.raises(ValueError, match=message):
        _cfg(c4, **change)
