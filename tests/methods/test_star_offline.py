"""STAR's offline variant: the loaders of D4RL-style and Minari HDF5 files and Preference
Transformer's label files (exact contents, and a missing field or wrong shape named before any
training), the offline losses (AWR weights, the expectile's minimiser, the AWR loss's gradient),
plain AWR's Monte-Carlo returns, and the whole offline path on a tiny generated dataset."""
from __future__ import annotations

import pickle

import h5py
import numpy as np
import pytest
import torch

from paperline.config import load_method_config, read_params
from paperline.io import DataError
from paperline.methods.star.config import StarConfig
from paperline.methods.star.offline import ExpectileQ, GaussianPolicy, awr_loss, awr_weights, expectile_loss, mc_returns
from paperline.rl.offline import (
    OfflineDataError,
    load_dataset,
    load_preference_labels,
    write_d4rl,
    write_preference_labels,
)
from tests.conftest import CHECKOUT
from tests.methods.star_helpers import lbfgs_minimise


def resolve(method: str, profile: str, overrides: list[str] | None = None) -> tuple[str, StarConfig]:
    """(profile, config) from the checkout's params files, as the flow resolves it."""
    return load_method_config(StarConfig, read_params(CHECKOUT / "params"), method, profile, overrides or [],
                              root=CHECKOUT)


def _d4rl(path, n=7):
    """Two episodes: rows 0..3 end by a timeout at row 3, rows 4..6 by a terminal at row 6."""
    obs = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    act = np.arange(n, dtype=np.float32)[:, None] / 10
    rew = np.arange(n, dtype=np.float32)
    term = np.zeros(n, bool)
    term[6] = True
    timeout = np.zeros(n, bool)
    timeout[3] = True
    return write_d4rl(path, obs, act, rew, term, timeout)


def test_a_d4rl_file_gives_qlearning_transitions(tmp_path):
    data = load_dataset(_d4rl(tmp_path / "d.hdf5"))
    # the timeout row (3) is dropped (its next observation is the next episode's), and the last row
    # (no next observation in the file) as D4RL's qlearning_dataset does
    assert data.reward.tolist() == [0, 1, 2, 4, 5]
    assert data.next_obs[:, 0].tolist() == [2, 4, 6, 10, 12]
    assert data.episode.tolist() == [0, 0, 0, 1, 1] and data.t.tolist() == [0, 1, 2, 0, 1]
    assert data.terminal.tolist() == [0, 0, 0, 0, 0]
    assert data.segment_starts(2).tolist() == [0, 1, 3]
    assert data.batch(np.array([4]))["act"].tolist() == [[pytest.approx(0.5)]]


def test_a_minari_file_gives_every_step(tmp_path):
    path = tmp_path / "main_data.hdf5"
    with h5py.File(path, "w") as f:
        for e, T in enumerate((3, 2)):
            g = f.create_group(f"episode_{e}")
            g["observations"] = np.arange((T + 1) * 2, dtype=np.float32).reshape(T + 1, 2) + 100 * e
            g["actions"] = np.zeros((T, 1), np.float32)
            g["rewards"] = np.arange(T, dtype=np.float64)
            g["terminations"] = np.eye(1, T, T - 1)[0].astype(bool) if e == 1 else np.zeros(T, bool)
            g["truncations"] = np.zeros(T, bool)
    data = load_dataset(path)
    assert len(data) == 5 and data.episode.tolist() == [0, 0, 0, 1, 1]
    assert data.next_obs[:, 0].tolist() == [2, 4, 6, 102, 104]
    assert data.terminal.tolist() == [0, 0, 0, 0, 1]
    assert data.episode_returns().tolist() == [3, 1]


@pytest.mark.parametrize("field", ["observations", "actions", "rewards", "terminals", "timeouts"])
def test_a_missing_field_is_named_with_its_file(tmp_path, field):
    path = _d4rl(tmp_path / "d.hdf5")
    with h5py.File(path, "a") as f:
        del f[field]
    with pytest.raises(DataError, match=rf"d\.hdf5: field '{field}' is missing"):
        load_dataset(path)


def test_a_wrong_shape_is_named_with_its_file(tmp_path):
    path = _d4rl(tmp_path / "d.hdf5")
    with h5py.File(path, "a") as f:
        del f["rewards"]
        f["rewards"] = np.zeros(5)
    with pytest.raises(OfflineDataError, match=r"d\.hdf5: field 'rewards' has 5 rows, expected 7"):
        load_dataset(path)
    with h5py.File(path, "a") as f:
        del f["actions"]
        f["actions"] = np.zeros(7)
    with pytest.raises(OfflineDataError, match=r"field 'actions' has shape \(7,\), expected 2-D"):
        load_dataset(path)
    minari = tmp_path / "m.hdf5"
    with h5py.File(minari, "w") as f:
        g = f.create_group("episode_0")
        g["observations"], g["actions"] = np.zeros((3, 2)), np.zeros((2, 1))
        g["rewards"], g["terminations"] = np.zeros(2), np.zeros(2)
    with pytest.raises(OfflineDataError, match=r"m\.hdf5: field 'episode_0/truncations' is missing"):
        load_dataset(minari)
    (tmp_path / "not.hdf5").write_text("hello")
    with pytest.raises(OfflineDataError, match=r"not\.hdf5: not a readable HDF5 file"):
        load_dataset(tmp_path / "not.hdf5")


def test_preference_transformer_label_files_round_trip(tmp_path):
    data = load_dataset(_d4rl(tmp_path / "d.hdf5"))
    folder = write_preference_labels(tmp_path / "labels", np.array([0, 3]), np.array([1, 0]), np.array([1.0, 0.5]))
    assert sorted(p.name for p in folder.iterdir()) == ["indices_2_num2", "indices_num2", "label_human"]
    assert pickle.loads((folder / "label_human").read_bytes()).tolist() == [0, -1]  # 0: the first preferred
    labels = load_preference_labels(folder, data, segment=2)
    assert labels.start0.tolist() == [0, 3] and labels.start1.tolist() == [1, 0] and labels.y.tolist() == [1.0, 0.5]
    # PT's own files: plain lists pickled, label 1 = the second segment preferred
    (folder / "label_human").write_bytes(pickle.dumps([1, 0]))
    assert load_preference_labels(folder, data, 2).y.tolist() == [0.0, 1.0]


def test_bad_label_files_are_named(tmp_path):
    data = load_dataset(_d4rl(tmp_path / "d.hdf5"))
    folder = write_preference_labels(tmp_path / "labels", np.array([0, 3]), np.array([1, 0]), np.array([1.0, 0.0]))
    with pytest.raises(OfflineDataError, match=r"indices_num2: start 3 at pair 1 leaves no 3-step segment"):
        load_preference_labels(folder, data, segment=3)
    (folder / "label_human").write_bytes(pickle.dumps([0, 2]))
    with pytest.raises(OfflineDataError, match=r"label_human: label 2 at pair 1 is not 0"):
        load_preference_labels(folder, data, 2)
    (folder / "label_human").write_bytes(pickle.dumps([0]))
    with pytest.raises(OfflineDataError, match=r"label_human: 1 entries, but .*indices_num2 has 2"):
        load_preference_labels(folder, data, 2)
    (folder / "label_human").write_bytes(pickle.dumps(np.zeros((2, 2), np.int64)))
    with pytest.raises(OfflineDataError, match=r"label_human: expected a 1-D list of integers, got shape \(2, 2\)"):
        load_preference_labels(folder, data, 2)
    (folder / "label_human").write_bytes(pickle.dumps(print))  # a pickle that would reach a global: refused
    with pytest.raises(OfflineDataError, match=r"label_human: not a pickle of plain numbers"):
        load_preference_labels(folder, data, 2)
    (folder / "indices_2_num2").unlink()
    with pytest.raises(OfflineDataError, match=r"expected one label file named indices_2_num\*, found none"):
        load_preference_labels(folder, data, 2)


def test_awr_weights_are_clipped_exponentials():
    adv = torch.tensor([-1.0, 0.0, 0.5, 10.0])
    w = awr_weights(adv, beta=3.0, clip=100.0)
    assert w.tolist() == pytest.approx([np.exp(-3.0), 1.0, np.exp(1.5), 100.0])


def test_the_awr_loss_is_the_weighted_negative_log_likelihood():
    torch.manual_seed(0)
    policy = GaussianPolicy(2, 1, 8, 1, np.array([-2.0], np.float32), np.array([2.0], np.float32))
    obs, act = torch.randn(4, 2), torch.tensor([[0.5], [-1.0], [1.5], [0.0]])
    w = torch.tensor([1.0, 0.0, 2.0, 0.5])
    mean, std = policy.mean(obs), policy.log_std.exp() * 2.0
    logp = (-0.5 * ((act - mean) / std) ** 2 - torch.log(std) - 0.5 * np.log(2 * np.pi)).sum(-1)
    assert awr_loss(policy, obs, act, w).item() == pytest.approx(-(w * logp).mean().item(), rel=1e-6)
    # a zero-weight action pulls nothing: the loss's gradient does not depend on it
    act2 = act.clone()
    act2[1] = 1.9
    g = [torch.autograd.grad(awr_loss(policy, obs, a, w), policy.log_std)[0] for a in (act, act2)]
    assert torch.allclose(g[0], g[1])


@pytest.mark.parametrize("tau", [0.5, 0.7, 0.9])
def test_the_expectile_loss_is_minimised_at_the_expectile(tau):
    q = torch.tensor([0.0, 1.0, 4.0])
    v = torch.zeros((), requires_grad=True)
    # the τ-expectile m solves τ Σ_{q>m}(q − m) = (1 − τ) Σ_{q<m}(m − q)
    m = lbfgs_minimise(v, lambda: expectile_loss(q, v.expand_as(q), tau)).item()
    assert tau * (q[q > m] - m).sum().item() == pytest.approx((1 - tau) * (m - q[q < m]).sum().item(), abs=1e-5)
    if tau == 0.5:
        assert m == pytest.approx(q.mean().item(), abs=1e-5)
    assert m >= q.mean().item() - 1e-6  # τ > ½ leans toward the in-sample max


def test_iql_value_uses_the_expectile_and_star_the_gumbel_regression():
    kw = dict(hidden=8, layers=1, lr=1e-3, beta=6.0, gamma=0.9, tau=0.5, target_every=1)
    q, v = torch.tensor([0.0, 1.0, 4.0]), torch.tensor([1.0, 1.0, 1.0])
    iql = ExpectileQ(2, 1, expectile=0.7, **kw)
    assert iql.value_loss(q, v).item() == pytest.approx(expectile_loss(q, v, 0.7).item())
    from paperline.methods.star.conservative import ConservativeQ, gumbel_loss

    assert ConservativeQ(2, 1, **kw).value_loss(q, v).item() == pytest.approx(gumbel_loss(q, v, 6.0).item())


def test_plain_awr_returns_stop_at_each_episode_end(tmp_path):
    data = load_dataset(_d4rl(tmp_path / "d.hdf5"))
    ret = mc_returns(data, np.array([1, 1, 1, 2, 2], np.float32), gamma=0.5)
    assert ret.tolist() == pytest.approx([1.75, 1.5, 1.0, 3.0, 2.0])


def test_the_offline_settings_are_checked_before_any_work():
    from paperline.config import ParamsError

    with pytest.raises(ParamsError, match=r"offline.task 'grid' is not a continuous task"):
        resolve("star", "tiny", ["offline.task=grid"])
    with pytest.raises(ParamsError, match=r"give both `dataset` and `labels`"):
        resolve("star", "tiny", ["offline.dataset=data.hdf5"])
    with pytest.raises(ParamsError, match=r"offline.segment 50 must be below task pendulum's episode_steps 50"):
        resolve("star", "tiny", ["offline.segment=50"])


def test_configured_offline_files_are_refused_by_the_reader_the_data_step_calls(tmp_path):
    """`offline.dataset`/`offline.labels` given: the flow's `data` step (run before any training
    row) reads them with `read_offline` against the task's environment, so a bad file is named
    first, not after the online rows."""
    from paperline.methods.star.envs import check_env
    from paperline.methods.star.offline import read_offline

    path = _d4rl(tmp_path / "d.hdf5")  # 2-wide observations, 1-wide actions
    folder = write_preference_labels(tmp_path / "labels", np.array([0, 3]), np.array([1, 0]), np.array([1.0, 0.0]))
    _, cfg = resolve("star", "tiny", [f"offline.dataset={path}", f"offline.labels={folder}", "offline.segment=2"])
    off = cfg.offline
    task = next(t for t in cfg.tasks if t.name == off.task)
    info = check_env(task.env_id, task.kind, task.env_kwargs)
    with pytest.raises(OfflineDataError, match=r"d\.hdf5: observations/actions of width 2/1, but Pendulum-v1 has 3/1"):
        read_offline(path, folder, off.segment, info)
    with h5py.File(path, "a") as f:
        del f["terminals"]
    with pytest.raises(OfflineDataError, match=r"d\.hdf5: field 'terminals' is missing"):
        read_offline(path, folder, off.segment, info)


class Killed(Exception):
    pass


def test_a_killed_offline_run_resumes_variant_by_variant_to_the_same_result(tmp_path, monkeypatch):
    from paperline.methods.star import offline
    from paperline.methods.star.envs import check_env

    _, cfg = resolve("star", "tiny")
    task = next(t for t in cfg.tasks if t.name == cfg.offline.task)
    info = check_env(task.env_id, task.kind, task.env_kwargs)

    def expert(obs):  # a fixed deterministic behaviour policy stands in for the oracle's SAC
        return np.clip(-obs[:1] * obs[2:3], info.low, info.high).astype(np.float32)

    whole = offline.run_offline(cfg, task, info, expert, 0, tmp_path / "whole")
    trained, train = [], offline.train_variant

    def kill_at_iql(variant, *args, **kwargs):
        trained.append(variant)
        if variant == "iql" and trained.count("iql") == 1:
            raise Killed
        return train(variant, *args, **kwargs)

    monkeypatch.setattr(offline, "train_variant", kill_at_iql)
    with pytest.raises(Killed):
        offline.run_offline(cfg, task, info, expert, 0, tmp_path / "killed")
    resumed = offline.run_offline(cfg, task, info, expert, 0, tmp_path / "killed")
    assert trained == ["star", "iql", "iql", "awr", "mr"]  # star was recorded before the kill, not retrained
    assert resumed == whole


def test_the_mr_baseline_is_iql_on_a_plain_bradley_terry_reward_the_others_share_stars(tmp_path, monkeypatch):
    from paperline.methods.star import offline
    from paperline.methods.star.envs import check_env

    _, cfg = resolve("star", "tiny")
    assert cfg.offline.variants == ["star", "iql", "awr", "mr"]
    task = next(t for t in cfg.tasks if t.name == cfg.offline.task)
    info = check_env(task.env_id, task.kind, task.env_kwargs)
    rewards, fits, train, fit = {}, [], offline.train_variant, offline.fit_reward

    def record(variant, off, gamma, beta, tau, target_every, info, data, reward, *args, **kwargs):
        rewards[variant] = reward.copy()
        return train(variant, off, gamma, beta, tau, target_every, info, data, reward, *args, **kwargs)

    def fit_and_record(*args, pmr=True, **kwargs):
        model, accuracy = fit(*args, pmr=pmr, **kwargs)
        fits.append(model.pmr_eps)
        return model, accuracy

    monkeypatch.setattr(offline, "train_variant", record)
    monkeypatch.setattr(offline, "fit_reward", fit_and_record)
    result = offline.run_offline(cfg, task, info, lambda obs: np.zeros(1, np.float32), 0, tmp_path)
    assert fits == [cfg.star.pmr_eps, 0.0]  # STAR's (PMR) reward model, then MR's plain one
    assert np.array_equal(rewards["star"], rewards["iql"]) and np.array_equal(rewards["star"], rewards["awr"])
    assert not np.allclose(rewards["mr"], rewards["star"])
    assert set(result["variants"]) == {"star", "iql", "awr", "mr"} and "mr_pref_accuracy" in result
    # without `mr` the other variants' results are the same: its reward model draws from its own generator
    cfg_no_mr = cfg.model_copy(update={"offline": cfg.offline.model_copy(update={"variants": ["star", "iql"]})})
    without = offline.run_offline(cfg_no_mr, task, info, lambda obs: np.zeros(1, np.float32), 0, tmp_path / "no-mr")
    assert without["variants"]["iql"] == result["variants"]["iql"]


def test_held_out_pairs_are_labelled_by_their_true_returns():
    from paperline.methods.star.offline import held_out_pairs
    from paperline.rl.offline import Transitions

    n = 12
    reward = np.array([0, 1, 2, 3, 4, 5, 5, 4, 3, 2, 1, 1], np.float32)
    data = Transitions(obs=np.zeros((n, 1), np.float32), act=np.zeros((n, 1), np.float32), reward=reward,
                       next_obs=np.zeros((n, 1), np.float32), terminal=np.zeros(n, np.float32),
                       episode=np.zeros(n, np.int64), t=np.arange(n))
    starts0, starts1, y = held_out_pairs(data, 2, 50, np.random.default_rng(0))
    drawn = np.random.default_rng(0).choice(data.segment_starts(2), size=(50, 2))  # the same draw, in order
    assert starts0.tolist() == drawn[:, 0].tolist() and starts1.tolist() == drawn[:, 1].tolist()
    r0, r1 = reward[starts0] + reward[starts0 + 1], reward[starts1] + reward[starts1 + 1]
    assert y.tolist() == np.where(r0 > r1, 1.0, np.where(r0 < r1, 0.0, 0.5)).tolist()
    assert {0.0, 0.5, 1.0} <= set(y.tolist())
