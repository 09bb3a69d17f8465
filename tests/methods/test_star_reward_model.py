"""The preference pieces: the Bradley–Terry loss, PMR's bounded return gap, the reward ensemble,
the scripted teacher, SURF's cropping."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from paperline.rl.reward_model import (
    RewardEnsemble,
    RewardSettings,
    SURFSettings,
    _crop,
    bradley_terry_loss,
    pmr_gap,
    smoothed_targets,
)
from paperline.rl.teacher import ScriptedTeacher, TeacherSettings, rational_labels, segment_returns
from tests.methods.star_helpers import lbfgs_minimise


def test_bradley_terry_loss_is_the_cross_entropy_of_the_softmax_of_returns():
    r0, r1, y = torch.tensor([2.0, -1.0, 0.5]), torch.tensor([0.0, 1.0, 0.5]), torch.tensor([1.0, 0.25, 0.5])
    p0 = [math.exp(2) / (math.exp(2) + 1), math.exp(-1) / (math.exp(-1) + math.e), 0.5]
    expected = -np.mean([yi * math.log(p) + (1 - yi) * math.log(1 - p) for yi, p in zip(y.tolist(), p0)])
    assert bradley_terry_loss(r0, r1, y).item() == pytest.approx(expected, rel=1e-6)


def test_smoothed_targets_keep_ties_and_move_hard_labels_by_eps():
    assert smoothed_targets(torch.tensor([1.0, 0.0, 0.5]), 0.05).tolist() == pytest.approx([0.95, 0.05, 0.5])
    assert smoothed_targets(torch.tensor([1.0, 0.0]), 0.0).tolist() == [1.0, 0.0]


@pytest.mark.parametrize("eps", [0.05, 0.1, 0.2])
def test_pmr_bounds_the_return_gap_on_separable_pairs(eps):
    """Free per-segment returns fitted to always-preferred σ⁰: with PMR the gap converges to
    log((1−ε)/ε) exactly; with hard targets it grows past it without bound."""
    assert pmr_gap(0.05) == pytest.approx(math.log(19), rel=1e-12) and pmr_gap(0.05) == pytest.approx(2.944, abs=1e-3)
    y = torch.ones(8)

    def fit(targets: torch.Tensor) -> torch.Tensor:
        r = torch.zeros(2, 8, requires_grad=True)  # the two segments' returns of 8 separable pairs
        fitted = lbfgs_minimise(r, lambda: bradley_terry_loss(r[0], r[1], targets), max_iter=100)
        return fitted[0] - fitted[1]

    assert fit(smoothed_targets(y, eps)).numpy() == pytest.approx(np.full(8, pmr_gap(eps)), abs=1e-4)
    assert (fit(y) > pmr_gap(eps) + 1.0).all()
    # the gradient of the smoothed loss vanishes at the bound
    gap = torch.tensor(pmr_gap(eps), requires_grad=True)
    bradley_terry_loss(gap.reshape(1), torch.zeros(1), smoothed_targets(torch.ones(1), eps)).backward()
    assert abs(gap.grad.item()) < 1e-7


def test_ensemble_rewards_lie_in_minus_one_one_and_training_learns_the_order():
    rng = np.random.default_rng(0)
    model = RewardEnsemble(2, RewardSettings(ensemble=3, hidden=16, layers=2, lr=1e-2, batch=32, updates=150),
                           torch.Generator().manual_seed(0))
    x = rng.normal(size=(64, 5, 2)).astype(np.float32) * 3
    r = model(torch.as_tensor(x))
    assert r.shape == (3, 64, 5) and r.abs().max() <= 1
    # true reward: the first feature; segments compared by its sum
    a, b = x[:32], x[32:]
    y = rational_labels(a[..., 0].sum(-1), b[..., 0].sum(-1))
    before = model.accuracy(a, b, y)
    model.train_session(a, b, y, rng)
    assert model.accuracy(a, b, y) >= 0.9 > before - 0.5
    assert model.disagreement(a, b).shape == (32,)


def test_teacher_labels_mistakes_ties_and_counts_queries():
    rewards0 = np.array([[1.0, 1.0], [0.0, 0.0], [0.5, 0.5], [0.0, 1.0]])
    rewards1 = np.array([[0.0, 0.0], [1.0, 1.0], [0.5, 0.5], [1.0, 0.0]])
    teacher = ScriptedTeacher(TeacherSettings(), np.random.default_rng(0))
    assert teacher.label(rewards0, rewards1).tolist() == [1.0, 0.0, 0.5, 0.5]
    assert teacher.queries == 4
    myopic = ScriptedTeacher(TeacherSettings(gamma=0.5), np.random.default_rng(0))
    assert segment_returns(rewards0[3:], 0.5).tolist() == [1.0] and myopic.label(rewards0[3:], rewards1[3:]).tolist() == [1.0]
    flips = ScriptedTeacher(TeacherSettings(mistake=1.0), np.random.default_rng(0))
    assert flips.label(rewards0, rewards1).tolist() == [0.0, 1.0, 0.5, 0.5]
    assert ScriptedTeacher(TeacherSettings(equal_margin=1.5), np.random.default_rng(0)).label(
        rewards0, rewards1).tolist() == [0.5] * 4  # every gap (≤ 2) under 1.5 · H = 3
    assert ScriptedTeacher(TeacherSettings(equal_margin=0.6), np.random.default_rng(0)).label(
        rewards0[:1] * 0.5, rewards1[:1]).tolist() == [0.5]
    noisy = ScriptedTeacher(TeacherSettings(mistake=0.3), np.random.default_rng(1))
    y = noisy.label(np.ones((2000, 3)), np.zeros((2000, 3)))
    assert 0.25 < (y == 0).mean() < 0.35 and noisy.queries == 2000
    state = noisy.state_dict()
    again = ScriptedTeacher(TeacherSettings(mistake=0.3), np.random.default_rng(9))
    again.load_state_dict(state)
    assert again.queries == 2000 and (again.label(np.ones((50, 1)), np.zeros((50, 1)))
                                      == noisy.label(np.ones((50, 1)), np.zeros((50, 1)))).all()


def test_surf_crop_takes_windows_of_each_segment():
    a = torch.arange(20, dtype=torch.float32).reshape(2, 10, 1)
    b = a + 100
    ca, cb = _crop(a, b, np.random.default_rng(3), 0.5)
    assert ca.shape == cb.shape and 5 <= ca.shape[1] <= 10
    for seg, crop in ((a, ca), (b, cb)):
        for i in range(2):  # a contiguous window of the original segment
            start = int(crop[i, 0, 0] - seg[i, 0, 0])
            assert torch.equal(crop[i], seg[i, start:start + crop.shape[1]])


def test_surf_pseudo_labels_the_pairs_the_ensemble_is_sure_of():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(96, 6, 2)).astype(np.float32) * 3
    a, b, ua, ub = x[:16], x[16:32], x[32:64], x[64:]
    y = rational_labels(a[..., 0].sum(-1), b[..., 0].sum(-1))
    settings = RewardSettings(ensemble=2, hidden=16, layers=2, lr=1e-2, batch=16, updates=60)
    sure = RewardEnsemble(2, settings, torch.Generator().manual_seed(0), surf=SURFSettings(threshold=0.6, crop=0.3))
    stats = sure.train_session(a, b, y, rng, unlabelled=(ua, ub))
    assert 0 < stats["pseudo_label_share"] <= 1
    never = RewardEnsemble(2, settings, torch.Generator().manual_seed(0), surf=SURFSettings(threshold=0.999999))
    assert never.train_session(a, b, y, rng, unlabelled=(ua, ub))["pseudo_label_share"] < stats["pseudo_label_share"]
    assert RewardEnsemble(2, settings).train_session(a, b, y, rng)["pseudo_label_share"] == 0.0
