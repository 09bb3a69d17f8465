"""GeoAda's fine-tuning protocol: every variant's rate chosen from one sweep on a held-out
validation set (never the test set), extended past an edge by the same rule for every variant, the training and validation curves, and both forgetting scores."""
from __future__ import annotations

import math

import pytest
import torch

from paperline.methods.geoada.config import GeoAdaConfig
from paperline.methods.geoada.experiment import finetune_variant, make_base
from paperline.methods.geoada.train import Windows, split_validation
from paperline.sweep import best_rate, loss_rank, past_edge

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


def test_the_sweep_extends_one_grid_step_past_the_edge_its_best_rate_sits_on():
    def next_rate(validation: dict[float, float]) -> float | None:  # GeoAda's rule: the best by validation loss
        return past_edge(validation, best_rate(validation, loss_rank))

    # the best on validation at the top: the next rate up; at the bottom: the next one down;
    # interior: none, the optimum bracketed
    assert next_rate({1e-3: 0.5, 4e-3: 0.4, 1.6e-2: 0.3}) == 1.6e-2 * 4
    assert next_rate({1e-3: 0.3, 4e-3: 0.4, 1.6e-2: 0.5}) == 1e-3 / 4
    assert next_rate({1e-3: 0.5, 4e-3: 0.3, 1.6e-2: 0.4}) is None
    # a diverged top ranks last: the best is then interior, not the NaN at the edge
    assert next_rate({1e-3: 0.5, 4e-3: 0.3, 1.6e-2: math.nan}) is None
    assert next_rate({1e-3: 0.5}) is None


def test_every_variant_sweeps_the_same_grid_extended_by_the_same_rule_chosen_on_validation(tmp_path):
    cfg = GeoAdaConfig(controls=["frame"], variants=["full_ft", "geoada"], shape={"hidden": 8, "blocks": 2, "time_dim": 8},
                       diffusion_steps=5, cond_frames=2, frame_control_frames=3, horizon=2,
                       finetune={"steps": 4, "batch_size": 4}, lr_sweep=[1e-4, 1e-3], lr_sweep_extend=2,
                       validation_trajectories=4, samples=2, eval_trajectories=3, gpf_head_blocks=1)
    data = {"frame_train": _windows(12, 3, 2, 1), "frame_test": _windows(3, 3, 2, 2),
            "original_test": _windows(3, 2, 2, 3)}
    torch.manual_seed(0)
    base = make_base(cfg)
    for variant in ("full_ft", "geoada"):
        result = finetune_variant(cfg, base, "frame", variant, data, tmp_path / variant / "train.pt", "test", seed=0)
        rates = sorted(float(lr) for lr in result.sweep)
        assert {"0.0001", "0.001"} <= set(result.sweep) and len(rates) <= 2 + cfg.lr_sweep_extend
        # every added rate is one grid step (× 10) past the grid tried before it, on the side the best was
        for i in range(1, len(rates)):
            assert math.isclose(rates[i] / rates[i - 1], 10.0)
        assert result.lr == min(rates, key=lambda lr: result.sweep[f"{lr:g}"])  # the validation loss's choice
        grid = {lr: result.sweep[f"{lr:g}"] for lr in (1e-4, 1e-3)}
        assert len(rates) > 2  # the best of a two-rate grid is on an edge: extended at least once
        assert (rates[-1] > 1e-3) == (grid[1e-3] < grid[1e-4])  # extended upward iff the top rate won
        if len(rates) < 2 + cfg.lr_sweep_extend:  # stopped early: the chosen rate is bracketed
            assert rates[0] < result.lr < rates[-1]
    # an extension steps by the grid's own step at the edge (paperline/sweep.py), so an uneven grid
    # is allowed; a one-rate "sweep" has no step to extend by
    with pytest.raises(ValueError, match="2 rates or more"):
        GeoAdaConfig(lr_sweep=[1e-4], lr_sweep_extend=1, validation_trajectories=4)
