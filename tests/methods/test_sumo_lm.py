"""The paper profile's path, LLaMA on C4 by path, on small files in the exact C4 format with a
tokenizer trained here: loader errors name the file, tokenization as GaLore's, the LLaMA (the shared
CausalLM in GaLore's shape) is causal and has GaLore's sizes, training through the shared LM loop
runs for each optimizer and resumes to the same result."""
from __future__ import annotations

import gzip
import math

import pytest
import torch

from paperline.data.c4 import (
    C4Tokenizer,
    c4_shards,
    read_documents,
    train_batches,
    write_c4_shard,
    write_word_level_tokenizer,
)
from paperline.methods.sumo import lm as sumo_lm
from paperline.methods.sumo.config import LLAMA_SIZES, SumoConfig
from paperline.methods.sumo.lm import llama_step_times, make_llama, pretrain_on_c4
from paperline.nn.causal_lm import CausalLM, llama_config

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
                seeds=[0], steps=12, batch_size=16, rank=4, update_period=5, adamw_part_lr=None, log_every=2,
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


def test_the_data_step_reads_each_shards_first_document_before_any_training(c4, tmp_path):
    from paperline.io import DataError
    from paperline.methods.sumo.data import c4_version

    root, tokenizer = c4
    assert c4_version(root, tokenizer).startswith("c4-sha256:")
    broken = tmp_path / "c4"
    broken.mkdir()
    for shard in root.iterdir():
        (broken / shard.name).write_bytes(shard.read_bytes())
    (broken / "c4-validation.00000-of-00008.json.gz").write_bytes(b"\x89PNG\r\n\x1a\n")  # not a gzip file
    with pytest.raises(DataError, match="c4-validation.00000-of-00008.json.gz"):
        c4_version(broken, tokenizer)


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


def test_llama_is_causal_and_has_galore_sizes(c4):
    model = make_llama(_cfg(c4), 0, CPU)
    tokens = torch.randint(0, 512, (2, 10), generator=torch.Generator().manual_seed(1))
    changed = tokens.clone()
    changed[:, 6:] = 3
    torch.testing.assert_close(model(tokens).logits[:, :6], model(changed).logits[:, :6])
    assert len(model.matrix_parameters()) == 7 * 2  # q, k, v, o, gate, up, down per layer


# GaLore's configs/llama_*.json: hidden_size, intermediate_size, num_attention_heads, num_hidden_layers
GALORE_CONFIGS = {"60m": (512, 1376, 8, 8), "130m": (768, 2048, 12, 12), "350m": (1024, 2736, 16, 24),
                  "1b": (2048, 5461, 32, 24)}


@pytest.mark.parametrize("size", GALORE_CONFIGS)
def test_each_preset_has_the_parameters_of_transformers_llama_at_galores_config(size):
    from transformers import LlamaConfig, LlamaForCausalLM

    hidden, intermediate, heads, layers = GALORE_CONFIGS[size]
    with torch.device("meta"):
        ours = sum(p.numel() for p in CausalLM(llama_config(**LLAMA_SIZES[size])).parameters())
        theirs = sum(p.numel() for p in LlamaForCausalLM(LlamaConfig(
            hidden_size=hidden, intermediate_size=intermediate, num_attention_heads=heads, num_hidden_layers=layers,
            vocab_size=32000, tie_word_embeddings=False)).parameters())
    assert ours == theirs
    if size == "60m":
        assert ours == 58_073_600


@pytest.mark.parametrize("name", ["adamw", "galore_adamw", "muon", "sumo", "sumo_ns"])
def test_every_optimizer_pretrains_the_tiny_llama(c4, name):
    cfg = _cfg(c4)
    result = pretrain_on_c4(cfg, name, cfg.lr_grid[name][0], 0, CPU)
    losses = result["history"]["train_loss"]
    assert not result["diverged"] and losses[-1] < losses[0]
    assert result["eval_history"]["step"] == [6, 12] and math.isfinite(result["val_perplexity"])
    assert result["state_floats"] == result["state_floats_formula"]
    assert result["tokens_seen"] > 0


class Killed(Exception):
    pass


def test_a_killed_pretraining_run_resumes_to_the_same_result(c4, tmp_path, monkeypatch):
    cfg = _cfg(c4, steps=8)  # 2 micro-batches a step, a checkpoint every 4 steps
    clean = pretrain_on_c4(cfg, "sumo", 0.1, 0, CPU)
    path = tmp_path / "seed0.pt"
    real_call = sumo_lm.C4Batches.__call__

    def killed_in_step_6(self, generator):
        if self.batches == 11:
            raise Killed
        return real_call(self, generator)

    monkeypatch.setattr(sumo_lm.C4Batches, "__call__", killed_in_step_6)
    with pytest.raises(Killed):
        pretrain_on_c4(cfg, "sumo", 0.1, 0, CPU, checkpoint_path=path)
    monkeypatch.setattr(sumo_lm.C4Batches, "__call__", real_call)
    resumed = pretrain_on_c4(cfg, "sumo", 0.1, 0, CPU, checkpoint_path=path)
    assert resumed["history"] == clean["history"] and resumed["final_test_loss"] == clean["final_test_loss"]
    assert resumed["tokens_seen"] == clean["tokens_seen"]


def test_bf16_training_keeps_low_rank_state_in_bf16(c4):
    cfg = _cfg(c4, steps=2, lm=_cfg(c4).lm.model_copy(update={"dtype": "bfloat16"}))
    result = pretrain_on_c4(cfg, "sumo", 0.1, 0, CPU)
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


def test_two_ddp_processes_pretrain_as_one_with_sumos_own_optimizer(c4, tmp_path, monkeypatch):
    """runtime.distributed over two CPU processes (gloo DDP, spawned by train_lm_spread): SUMO's
    optimizer is built in each process (OptimizerFactory crosses by pickle, no closure), every
    process reads the same C4 micro-batches and trains on its half, so at the same global batch
    the loss curve is the one-process curve within 1e-4 relative (the all-reduce sums the gradient
    in another order, and the SVD of the subspace sees that much), the trained weights come back to
    this process, and the state, limiter and token counts come back through the optimizer's record."""
    import numpy as np

    from paperline.train.distributed import DistributedConfig, DistributedError

    torch.set_num_threads(1)
    models = []
    real_make = sumo_lm.make_llama
    monkeypatch.setattr(sumo_lm, "make_llama", lambda *a: models.append(real_make(*a)) or models[-1])
    # 16 sequences a step: 2 micro-batches of 8, 4 rows each per process. Every document has ≥ 5
    # words + EOS, so at max_length 6 no row is padded: each process's mean loss is over as many
    # tokens as the other's, and their average is the one-process mean (with padding, DDP weighs
    # the processes' rows equally rather than by their tokens, as GaLore's torchrun DDP does)
    cfg = _cfg(c4, steps=6, log_every=1, lm=_cfg(c4).lm.model_copy(update={"max_length": 6}))
    one = pretrain_on_c4(cfg, "sumo", 0.1, 0, CPU)
    two = pretrain_on_c4(cfg, "sumo", 0.1, 0, CPU, checkpoint_path=tmp_path / "seed0.pt",
                         distributed=DistributedConfig(strategy="ddp", accelerator="cpu", devices=2))
    assert (one["processes"], two["processes"]) == (1, 2)
    assert two["history"]["step"] == one["history"]["step"] == list(range(1, 7))
    np.testing.assert_allclose(two["history"]["train_loss"], one["history"]["train_loss"], rtol=1e-4)
    np.testing.assert_allclose(two["eval_history"]["val_loss"], one["eval_history"]["val_loss"], rtol=1e-4)
    assert one["history"]["train_loss"][-1] < one["history"]["train_loss"][0] - 0.05  # it trained
    for key in ("tokens_seen", "state_floats", "state_bytes", "limiter_fraction"):
        assert two[key] == one[key], key
    assert (tmp_path / "seed0.optimizer.json").is_file()  # kept for a run that resumes at its end
    for name, weight in models[0].state_dict().items():
        torch.testing.assert_close(models[1].state_dict()[name], weight, rtol=1e-3, atol=1e-5)
    with pytest.raises(DistributedError, match="runtime.distributed.strategy: fsdp shards the weight matrices"):
        pretrain_on_c4(cfg, "sumo", 0.1, 0, CPU, distributed=DistributedConfig(strategy="fsdp", devices=2))
