"""Preference Transformer, the offline `pt` baseline: the segment score is a convex combination of
the per-step rewards, each reward sees only its past while the weights see the whole segment, the
relabelled reward of a transition is the model's at its step given its episode's past only, a fit
on a tiny generated preference set ranks held-out pairs well above chance, and in the offline run
`pt` is IQL on its own rewards without changing the other variants' results."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from paperline.methods.star import preference_transformer as pt
from paperline.methods.star.offline import held_out_pairs
from paperline.methods.star.preference_transformer import PreferenceTransformer, PTSettings
from paperline.rl.offline import PreferenceLabels, Transitions
from paperline.rl.teacher import rational_labels

SMALL = PTSettings(embed=16, layers=1, heads=2, dropout=0.0, lr=3e-3, batch=64, updates=80)


def _model(segment=6, seed=0):
    torch.manual_seed(seed)
    return PreferenceTransformer(2, 1, segment, SMALL).eval()


def _data(episodes=24, steps=30, seed=0) -> Transitions:
    """Random-walk episodes with the true reward −|s₀| (the first state coordinate)."""
    rng = np.random.default_rng(seed)
    obs = np.cumsum(rng.normal(0, 0.5, (episodes, steps, 2)), 1).astype(np.float32).reshape(-1, 2)
    act = rng.uniform(-1, 1, (episodes * steps, 1)).astype(np.float32)
    return Transitions(
        obs=obs,
        act=act,
        reward=-np.abs(obs[:, 0]),
        next_obs=obs,
        terminal=np.zeros(len(obs), np.float32),
        episode=np.repeat(np.arange(episodes), steps),
        t=np.tile(np.arange(steps), episodes),
    )


def test_the_score_is_a_convex_combination_of_the_step_rewards():
    model = _model()
    obs, act = torch.randn(5, 6, 2), torch.randn(5, 6, 1)
    reward, score = model(obs, act)
    w = model.step_weights(obs, act)
    assert (w >= 0).all() and torch.allclose(w.sum(-1), torch.ones(5))
    assert torch.allclose(score, (w * reward).sum(-1), atol=1e-6)
    assert not torch.allclose(w, torch.full_like(w, 1 / 6), atol=1e-3)  # learned weights, not a plain mean


def test_a_step_reward_sees_only_its_past_and_the_weights_the_whole_segment():
    model = _model()
    obs, act = torch.randn(3, 6, 2), torch.randn(3, 6, 1)
    later = obs.clone()
    later[:, 4:] += 5.0  # change steps 4 and 5 only
    r0, r1 = model(obs, act)[0], model(later, act)[0]
    assert torch.allclose(r0[:, :4], r1[:, :4], atol=1e-6)  # causal: steps 0..3 unchanged
    assert not torch.allclose(r0[:, 4:], r1[:, 4:])
    w0, w1 = model.step_weights(obs, act), model.step_weights(later, act)
    assert not torch.allclose(w0[:, :4], w1[:, :4])  # bidirectional: earlier weights move too


def test_relabelling_gives_each_step_its_reward_given_its_episode_past_only():
    segment = 6
    model, data = _model(segment), _data(episodes=3, steps=10)
    reward = pt.relabel(model, data, segment, chunk=7)  # chunks cut across episodes
    window = lambda lo: (
        torch.as_tensor(data.obs[lo : lo + segment])[None],
        torch.as_tensor(data.act[lo : lo + segment])[None],
    )
    for e in range(3):
        first = 10 * e
        head = model(*window(first))[0][0]
        assert reward[first : first + segment].tolist() == pytest.approx(head.tolist(), abs=1e-5)  # its first window
        for i in range(first + segment - 1, first + 10):  # the window of `segment` steps ending there
            assert reward[i] == pytest.approx(model(*window(i - segment + 1))[0][0, -1].item(), abs=1e-5)
    # the next episode's steps never reach an earlier episode's rewards
    other = Transitions(**{k: v.copy() for k, v in vars(data).items()})
    other.obs[10:] += 3.0
    assert pt.relabel(model, other, segment)[:10].tolist() == pytest.approx(reward[:10].tolist(), abs=1e-6)


def test_a_fit_on_a_tiny_preference_set_ranks_held_out_pairs_above_chance():
    segment = 5
    data = _data()
    rng = np.random.default_rng(1)
    starts = data.segment_starts(segment)
    pairs = rng.choice(starts, size=(300, 2))
    r = [data.reward[pairs[:, i, None] + np.arange(segment)].sum(-1) for i in (0, 1)]
    labels = PreferenceLabels(start0=pairs[:, 0], start1=pairs[:, 1], y=rational_labels(*r))
    held = held_out_pairs(data, segment, 200, rng)
    before = pt.accuracy(_model(segment), data, *held, segment)
    after = pt.accuracy(pt.fit(data, labels, segment, SMALL, seed=0), data, *held, segment)
    assert after > 0.8 and after > before + 0.15  # 0.875-0.89 at 60 steps over three draws


def test_a_fit_is_its_seeds_whatever_the_global_generator_did():
    data, short = _data(episodes=4), SMALL.model_copy(update={"updates": 5, "dropout": 0.1})
    starts = data.segment_starts(5)[:20]
    labels = PreferenceLabels(start0=starts[:10], start1=starts[10:], y=np.ones(10))
    first = pt.relabel(pt.fit(data, labels, 5, short, seed=3), data, 5)
    torch.rand(3)
    assert np.array_equal(pt.relabel(pt.fit(data, labels, 5, short, seed=3), data, 5), first)
    assert not np.array_equal(pt.relabel(pt.fit(data, labels, 5, short, seed=4), data, 5), first)


def test_the_pt_baseline_is_iql_on_its_own_rewards_and_leaves_the_others_unchanged(tmp_path, monkeypatch):
    from paperline.methods.star import offline
    from paperline.methods.star.envs import check_env
    from tests.methods.test_star_offline import resolve

    _, cfg = resolve("star", "tiny", ["offline.variants=[iql,pt]"])  # the paper profile's variant, tiny
    task = next(t for t in cfg.tasks if t.name == cfg.offline.task)
    info = check_env(task.env_id, task.kind, task.env_kwargs)
    rewards, values, train = {}, {}, offline.train_variant
    expectile_q = offline.ExpectileQ

    def record(variant, off, gamma, beta, tau, target_every, info, data, reward, *args, **kwargs):
        rewards[variant] = reward.copy()
        return train(variant, off, gamma, beta, tau, target_every, info, data, reward, *args, **kwargs)

    def iql_value(*args, **kwargs):
        values[len(values)] = kwargs["expectile"]
        return expectile_q(*args, **kwargs)

    monkeypatch.setattr(offline, "train_variant", record)
    monkeypatch.setattr(offline, "ExpectileQ", iql_value)
    expert = lambda obs: np.zeros(1, np.float32)  # noqa: E731
    result = offline.run_offline(cfg, task, info, expert, 0, tmp_path / "with")
    assert list(values.values()) == [cfg.offline.expectile] * 2  # both extractions IQL's
    assert not np.allclose(rewards["pt"], rewards["iql"])
    assert 0 <= result["pt_pref_accuracy"] <= 1 and set(result["variants"]) == {"iql", "pt"}
    alone = cfg.model_copy(update={"offline": cfg.offline.model_copy(update={"variants": ["iql"]})})
    without = offline.run_offline(alone, task, info, expert, 0, tmp_path / "without")
    assert without["variants"]["iql"] == result["variants"]["iql"] and without["pt_pref_accuracy"] is None


def test_a_recorded_pt_extraction_is_neither_refitted_nor_retrained(tmp_path, monkeypatch):
    from paperline.methods.star import offline
    from paperline.methods.star.envs import check_env
    from tests.methods.test_star_offline import resolve

    _, cfg = resolve("star", "tiny", ["offline.variants=[pt]"])
    task = next(t for t in cfg.tasks if t.name == cfg.offline.task)
    info = check_env(task.env_id, task.kind, task.env_kwargs)
    expert = lambda obs: np.zeros(1, np.float32)  # noqa: E731
    first = offline.run_offline(cfg, task, info, expert, 0, tmp_path)
    assert 0 <= first["pt_pref_accuracy"] <= 1

    def refused(*args, **kwargs):
        raise AssertionError("a recorded extraction's model fitted or trained again")

    monkeypatch.setattr(pt, "fit", refused)
    monkeypatch.setattr(offline, "train_variant", refused)
    assert offline.run_offline(cfg, task, info, expert, 0, tmp_path) == first  # its accuracy read back with it
    held = cfg.offline.model_copy(update={"held_out_pairs": 7})  # its record holds PT's accuracy: a new key
    with pytest.raises(AssertionError, match="fitted or trained again"):
        offline.run_offline(cfg.model_copy(update={"offline": held}), task, info, expert, 0, tmp_path)
