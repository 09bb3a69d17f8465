"""SplashNet's Lightning Trainer under `runtime.distributed`: two CPU processes (DDP, gloo,
spawned for the fit) train the generic model, the weights and both curves come back to the calling
process, and validation CER is computed over every process's sessions; FSDP and several nodes are
refused naming the key, before any process starts."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from paperline.methods.splashnet.config import SplashNetConfig
from paperline.methods.splashnet.data import WindowDataset
from paperline.methods.splashnet.features import SessionFeatures
from paperline.methods.splashnet.lightning_module import CTCModule
from paperline.methods.splashnet.pipeline import _fit, model_spec
from paperline.train.distributed import DistributedConfig, DistributedError, trainer_arguments

SIZES = {k: {"mlp_features": [8], "block_channels": [4]} for k in ("baseline", "splashnet_mini", "splashnet")}


def _session(i: int, frames: int = 120) -> SessionFeatures:
    rng = np.random.default_rng(i)
    keys = np.sort(rng.uniform(0, frames * 0.9, size=12)).astype(np.float64)
    return SessionFeatures(name=f"s{i}", user=f"u{i % 2}",
                           features=rng.standard_normal((frames, 2, 16, 33)).astype(np.float32),
                           frame_time=np.arange(frames, dtype=np.float64),
                           key_time=keys, key_label=rng.integers(1, 20, size=12).astype(np.int64))


def test_two_ddp_processes_fit_and_bring_back_weights_and_curves(tmp_path):
    torch.set_num_threads(1)
    cfg = SplashNetConfig(sizes=SIZES, batch_size=2, val_every=3, checkpoint_every=100, kernel_width=3)
    spec = model_spec(cfg, "baseline")
    dataset = WindowDataset([_session(i) for i in range(4)], 40, 4, 2, None, 0)
    torch.manual_seed(0)
    module = CTCModule(spec, 1e-2, 0, 6)
    before = {k: v.clone() for k, v in module.model.state_dict().items()}
    ddp = DistributedConfig(strategy="ddp", accelerator="cpu", devices=2)
    _fit(module, dataset, cfg, 6, torch.device("cpu"), tmp_path / "ckpt", "fp", 0,
         val=[_session(10 + i) for i in range(3)], distributed=ddp)
    # rank 0's weights are back in this process (the best validation CER's, as emg2qwerty chooses)
    assert any(not torch.equal(before[k], v) for k, v in module.model.state_dict().items())
    assert [step for step, _ in module.history] == list(range(6))  # rank 0's losses, every step
    assert [step for step, _ in module.val_history] == [3, 6]
    assert all(0.0 <= cer for _, cer in module.val_history)


def test_strategies_a_trainer_cannot_take_are_refused():
    with pytest.raises(DistributedError, match="runtime.distributed.strategy: fsdp shards models"):
        trainer_arguments(DistributedConfig(strategy="fsdp", accelerator="cuda" if torch.cuda.is_available() else "cpu"))
    with pytest.raises(DistributedError, match="runtime.distributed.num_nodes: 2 nodes"):
        trainer_arguments(DistributedConfig(strategy="ddp", accelerator="cpu", num_nodes=2))
    args = trainer_arguments(DistributedConfig(accelerator="cpu"))
    assert args == {"accelerator": "cpu", "devices": 1, "num_nodes": 1, "strategy": "auto", "precision": "32-true"}
