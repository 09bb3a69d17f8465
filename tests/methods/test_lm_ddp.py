"""The shared LM loop under Lightning DDP: two CPU processes (gloo, spawned by `train_lm_spread` as
the flows do) at a global batch of 8 give the
loss curve of one process at the same global batch, within float-reduction tolerance (1e-5
relative: the gradient all-reduce sums in another order than one process's backward); and the
strategies the machine cannot run are refused before any process starts, naming the key."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from paperline.nn.causal_lm import CausalLM, CausalLMConfig
from paperline.train.distributed import DistributedConfig, DistributedError, make_fabric, shard_rows
from paperline.train.lm import LMTrainSettings, train_lm, train_lm_spread

SETTINGS = LMTrainSettings(steps=6, batch_size=8, block_size=16, lr=1e-2, min_lr=1e-3, warmup_steps=1,
                           eval_every=3, eval_windows=4, log_every=1, checkpoint_every=100, micro_batches=2)


def _model() -> CausalLM:
    config = CausalLMConfig(vocab_size=64, hidden_size=32, num_layers=2, num_heads=2, head_dim=16)
    return CausalLM.seeded(config, torch.Generator().manual_seed(0))


def _tokens() -> tuple[np.ndarray, np.ndarray]:
    cycle = np.random.default_rng(0).permutation(64).astype(np.uint16)  # learnable: a fixed cycle
    return np.tile(cycle, 63), np.tile(cycle, 10)


def test_two_ddp_processes_give_the_one_process_loss_curve(tmp_path):
    """Through `train_lm_spread`, as the flows call it with params/runtime.yaml runtime.distributed: the
    processes are spawned for the training, the weights and the MLflow-style log come back."""
    torch.set_num_threads(1)
    single_model = _model()
    single = train_lm(single_model, *_tokens(), SETTINGS, "cpu")
    train, val = _tokens()
    train.tofile(tmp_path / "train.bin")  # a token file crosses into the processes by its path
    train = np.memmap(tmp_path / "train.bin", dtype=np.uint16, mode="r")
    logged = []
    ddp_model = _model()
    ddp = train_lm_spread(DistributedConfig(strategy="ddp", accelerator="cpu", devices=2), ddp_model, train, val,
                          SETTINGS, "cpu", on_log=lambda step, m: logged.append((step, m)))
    assert ddp["history"]["step"] == single["history"]["step"] == list(range(1, 7))
    np.testing.assert_allclose(ddp["history"]["train_loss"], single["history"]["train_loss"], rtol=1e-5)
    np.testing.assert_allclose(ddp["eval_history"]["val_loss"], single["eval_history"]["val_loss"], rtol=1e-5)
    assert ddp["tokens_seen"] == single["tokens_seen"] == 6 * 2 * 8 * 16
    for name, weight in single_model.state_dict().items():  # the trained weights are back in this process
        torch.testing.assert_close(ddp_model.state_dict()[name], weight, rtol=1e-4, atol=1e-5)
    assert [step for step, m in logged if "val_loss" in m] == [3, 6] and len(logged) == 8
    # and training moved: the curve is not flat (the comparison would otherwise be empty)
    assert single["history"]["train_loss"][-1] < single["history"]["train_loss"][0] - 0.05


def test_one_cpu_process_is_the_plain_loop():
    torch.set_num_threads(1)
    plain, spread_model = _model(), _model()
    a = train_lm(plain, *_tokens(), SETTINGS, "cpu")
    b = train_lm_spread(DistributedConfig(), spread_model, *_tokens(), SETTINGS, "cpu")
    assert a["history"]["train_loss"] == b["history"]["train_loss"]  # bit-identical
    assert all(torch.equal(w, spread_model.state_dict()[k]) for k, w in plain.state_dict().items())


def test_shard_rows_and_refused_strategies():
    x = torch.arange(12).reshape(6, 2)
    assert torch.equal(torch.cat([shard_rows(x, r, 3) for r in range(3)]), x)
    with pytest.raises(DistributedError, match="batch_size: 6 rows do not split over 4 processes"):
        shard_rows(x, 0, 4)
    with pytest.raises(DistributedError, match="distributed.strategy: fsdp needs CUDA devices"):
        make_fabric(DistributedConfig(strategy="fsdp", accelerator="cpu", devices=2))
    with pytest.raises(DistributedError, match="runtime.distributed.num_nodes: 2 nodes cannot be spawned"):
        train_lm_spread(DistributedConfig(strategy="ddp", accelerator="cpu", num_nodes=2), _model(), *_tokens(),
                        SETTINGS, "cpu")
    with pytest.raises(DistributedError, match="strategy: single runs one device"):
        make_fabric(DistributedConfig(strategy="single", accelerator="cpu", devices=2))
    if not torch.cuda.is_available():
        with pytest.raises(DistributedError, match="distributed.accelerator: cuda, but no CUDA device is visible"):
            make_fabric(DistributedConfig(strategy="ddp", accelerator="cuda", devices=2))
    else:
        with pytest.raises(DistributedError, match="devices a node asked"):
            make_fabric(DistributedConfig(strategy="ddp", accelerator="cuda", devices=torch.cuda.device_count() + 1))
    assert make_fabric(DistributedConfig(accelerator="cpu"))._precision.__class__.__name__ == "Precision"  # fp32 on CPU


def test_the_spawning_fsdp_strategy_is_built_on_first_use():
    """The FSDP launcher swapped for the spawn launcher: the class exists only once the module's
    __getattr__ has built it, and `_spawning_strategy` must reach it that way (a NameError before)."""
    from paperline.train import distributed

    strategy = distributed._spawning_strategy("fsdp")
    assert type(strategy).__name__ == "SpawnedFSDP" and isinstance(strategy, distributed.SpawnedFSDP)
