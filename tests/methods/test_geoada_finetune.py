"""GeoAda's fine-tuning protocol: every variant's rate chosen from one sweep on a held-out
validation set (never the test set), the training and validation curves, and both forgetting scores."""
from __future__ import annotations

import math

import torch

from paperline.methods.geoada.config import GeoAdaConfig
from paperline.methods.geoada.experiment import finetune_variant, make_base
from paperline.methods.geoada.train import Windows, split_validation

N = 4


def _windows(count: int, cond: int, horizon: int, seed: int) -> Windows:
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 2, (count, N), generator=g).float() * 2 - 1
    steps = torch.cumsum(torch.randn(count, cond + horizon, N, 3, generator=g) * 0.1, dim=1)
    return Windows(steps[:, :cond], steps[:, cond:], q, q[:, :, None] * q[:, None], None)


def test_split_validation_holds_out_the_last_windows():
    data = _windows(10, 3, 2, 0)
    train, validation = split_validation(data, 3)
    assert len(train) == 7 and validation is not None and len(validation) == 3
    assert torch.equal(validation.cond, data.cond[7:]) and torch.equal(train.cond, data.cond[:7])
    assert split_validation(data, 0) == (data, None)


def test_each_variant_keeps_the_rate_with_the_lowest_validation_loss(tmp_path):
    cfg = GeoAdaConfig(controls=["frame"], variants=["frozen", "geoada"], shape={"hidden": 8, "blocks": 2, "time_dim": 8},
                       diffusion_steps=5, cond_frames=2, frame_control_frames=3, horizon=2,
                       finetune={"steps": 6, "batch_size": 4}, lr_sweep=[1e-3, 3e-2], validation_trajectories=4,
                       samples=2, eval_trajectories=3, gpf_head_blocks=1)
    data = {"frame_train": _windows(12, 3, 2, 1), "frame_test": _windows(3, 3, 2, 2),
            "original_test": _windows(3, 2, 2, 3)}
    torch.manual_seed(0)
    base = make_base(cfg)
    result = finetune_variant(cfg, base, "frame", "geoada", data, tmp_path / "train.pt", "test", seed=0)
    assert set(result.sweep) == {"0.001", "0.03"}
    assert {p.parent.name for p in tmp_path.glob("lr*/train.pt")} <= {"lr0.001", "lr0.03"}  # a checkpoint a rate
    assert result.lr == min((1e-3, 3e-2), key=lambda lr: result.sweep[f"{lr:g}"])
    assert result.validation_loss == result.sweep[f"{result.lr:g}"]
    assert len(result.validation_curve) == len(result.steps) == len(result.loss) > 0
    assert result.original_task is None and result.original_task_on is not None  # its adapter acts on any input
    assert result.zero_init_max is not None and result.zero_init_max > 0  # ϕ left zero
    # the other seeds train at the chosen rate only
    again = finetune_variant(cfg, base, "frame", "geoada", data, None, "test", seed=1, lrs=[result.lr])
    assert again.lr == result.lr and again.sweep == {}
    frozen = finetune_variant(cfg, base, "frame", "frozen", data, tmp_path / "train.pt", "test", seed=0)
    assert frozen.lr is None and frozen.steps == [] and math.isfinite(frozen.validation_loss)
    assert frozen.zero_init_max is None  # nothing trainable
