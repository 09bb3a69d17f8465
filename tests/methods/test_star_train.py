"""The STAR training loop and its inputs: environments refused with their reason, the grid world's
dynamics, the relabelling buffer, a killed run resumed to the same result, the summary's rows and claims."""
from __future__ import annotations

import numpy as np
import pytest

from paperline.methods.star.config import StarConfig, row_name, runs_of
from paperline.methods.star.envs import GRID_ID, EnvError, GridWorld, check_env
from paperline.methods.star.evaluate import discounted_returns, evaluate, mc_steps, soft_returns
from paperline.methods.star.summary import method_metrics, normalised, summarize
from paperline.methods.star.train import train_run
from paperline.rl.buffer import ReplayBuffer

PENDULUM = {"name": "pendulum", "env_id": "Pendulum-v1", "kind": "continuous", "episode_steps": 20, "steps": 120,
            "seed_steps": 20, "unsup_steps": 40, "budgets": [4], "segment": 5, "feedback_every": 20,
            "queries_per_session": 2, "candidates_factor": 3, "eval_every": 60, "eval_episodes": 1, "held_out_pairs": 10}
GRID = {"name": "grid", "env_id": GRID_ID, "kind": "discrete", "env_kwargs": {"size": 4}, "episode_steps": 15,
        "steps": 150, "seed_steps": 30, "budgets": [4], "segment": 5, "feedback_every": 30, "queries_per_session": 2,
        "candidates_factor": 3, "eval_every": 50, "eval_episodes": 1, "held_out_pairs": 10}


def _cfg(**over) -> StarConfig:
    return StarConfig.model_validate({
        "tasks": [PENDULUM, GRID], "variants": ["oracle", "pebble", "star"], "seeds": [0],
        "sac": {"hidden": 16, "layers": 1, "batch": 16}, "dqn": {"hidden": 16, "layers": 1, "batch": 16},
        "reward": {"ensemble": 2, "hidden": 16, "layers": 1, "batch": 8, "updates": 3}, "mc_tail": 0.2,
        "checkpoint_every_episodes": 1} | over)


@pytest.mark.parametrize("env_id, kind, message", [
    ("NoSuchEnv-v0", "continuous", r"'NoSuchEnv-v0': not a registered gymnasium environment"),
    ("CartPole-v1", "continuous", r"'CartPole-v1': action space Discrete\(2\) is not one the continuous"),
    ("Pendulum-v1", "discrete", r"'Pendulum-v1': observation space Box.* is not one the discrete"),
    ("Blackjack-v1", "discrete", r"'Blackjack-v1': observation space Tuple"),
])
def test_environments_the_agents_cannot_take_are_refused_naming_them(env_id, kind, message):
    with pytest.raises(EnvError, match=message):
        check_env(env_id, kind)


def test_grid_world_rewards_progress_ends_in_traps_and_keeps_the_goal():
    env = GridWorld(4)  # traps: row 2, columns 1 and 3 (the gap at column 2)
    s, _ = env.reset(seed=0)
    assert s == 0 and env.true_reward((0, 0)) == 0.0 and env.true_reward((3, 3)) == 1.0
    s, r, term, _, _ = env.step(2)  # down to (1, 0)
    assert (s, r, term) == (4, pytest.approx(1 - 5 / 6), False)
    env.pos = (1, 1)
    s, r, term, _, _ = env.step(2)  # into the trap at (2, 1)
    assert term and r == 0.0
    env.pos = (3, 3)
    assert env.step(0)[:3] == (15, 1.0, False)  # the goal is absorbing


def test_buffer_relabels_and_draws_segments_within_episodes():
    b = ReplayBuffer(10, 1, 1)
    for i in range(7):
        ep, t = (0, i) if i < 4 else (1, i - 4)
        b.add([i], [0.5], [i + 1], float(i), 0.0, False, ep, t)
    assert b.segment_starts(3).tolist() == [0, 1, 4]  # no segment crosses the episode boundary
    b.relabel(lambda obs, act: obs[:, 0] * 2 + act[:, 0])
    assert b.reward[:7].tolist() == [2 * i + 0.5 for i in range(7)] and b.true_reward[6] == 6.0
    state = b.state_dict()
    c = ReplayBuffer(10, 1, 1)
    c.load_state_dict(state)
    assert c.size == 7 and c.reward[:7].tolist() == b.reward[:7].tolist()


def test_monte_carlo_horizon_and_returns():
    assert mc_steps(0.99, 0.01) == 459 and 0.99 ** 459 < 0.01 < 0.99 ** 458
    assert discounted_returns(np.array([1.0, 0.0, 2.0]), 0.5).tolist() == [1.5, 1.0, 2.0]
    # a soft Q's return: the bonus of the first step is not counted, the later ones are discounted
    assert soft_returns(np.array([1.0, 0.0, 2.0]), np.array([9.0, 4.0, 8.0]), 0.5).tolist() == [
        1.0 + 0.5 * (0.0 + 4.0) + 0.25 * (2.0 + 8.0), 0.0 + 0.5 * (2.0 + 8.0), 2.0]


def test_the_config_refuses_a_run_without_its_oracle_and_feedback_after_the_end():
    with pytest.raises(ValueError, match="oracle"):
        _cfg(variants=["pebble"])
    with pytest.raises(ValueError, match="feedback would start at step 200"):
        _cfg(tasks=[PENDULUM | {"seed_steps": 200}])
    names = [row_name(t.name, v, b) for t, v, b in runs_of(_cfg())]
    assert names == ["pendulum-oracle", "pendulum-pebble-4", "pendulum-star-4", "grid-oracle", "grid-pebble-4",
                     "grid-star-4"]


class Killed(Exception):
    pass


@pytest.mark.parametrize("task", ["pendulum", "grid"])
def test_a_killed_run_resumes_from_its_checkpoint_to_the_same_result(task, tmp_path):
    cfg = _cfg()
    t = next(t for t in cfg.tasks if t.name == task)
    whole = train_run(cfg, t, "star", 4, 0)
    assert whole["labels"] == 4 and len(whole["curve"]["step"]) == t.steps // t.eval_every

    def kill(step, value):
        if step > t.steps // 2:
            raise Killed

    ckpt = tmp_path / "run.pt"
    with pytest.raises(Killed):
        train_run(cfg, t, "star", 4, 0, checkpoint=ckpt, on_eval=kill)
    assert ckpt.exists()
    resumed = train_run(cfg, t, "star", 4, 0, checkpoint=ckpt)
    drop = ("seconds",)
    assert {k: v for k, v in resumed.items() if k not in drop} == {k: v for k, v in whole.items() if k not in drop}


def test_the_final_evaluation_is_the_last_point_of_the_curve_not_played_again(monkeypatch):
    from paperline.methods.star import train

    cfg = _cfg(tasks=[PENDULUM])
    calls = []
    monkeypatch.setattr(train, "evaluate", lambda *a, **k: calls.append(1) or evaluate(*a, **k))
    result = train_run(cfg, cfg.tasks[0], "oracle", None, 0)
    assert result["return"] == result["curve"]["return"][-1]
    assert len(calls) == len(result["curve"]["step"]) + 1  # the curve's evaluations and the random policy's


def test_summary_normalises_by_the_same_seed_oracle_and_computes_the_claims():
    cfg = _cfg(tasks=[PENDULUM], seeds=[0, 1, 2])

    def seed(ret, over, acc=0.8):
        return {"return": ret, "random_return": -1000.0, "overestimation": over, "overestimation_rel": over / 100,
                "pref_accuracy": acc, "labels": 4, "seconds": 1.0, "curve": {"step": [60, 120], "return": [ret, ret]},
                "reward_stats": []}

    results = {"pendulum-oracle": {"task": "pendulum", "variant": "oracle", "budget": None,
                                   "seeds": [seed(-200.0, 5.0, None), seed(-400.0, 5.0, None), seed(-200.0, 5.0, None)]},
               "pendulum-pebble-4": {"task": "pendulum", "variant": "pebble", "budget": 4,
                                     "seeds": [seed(-600.0, 30.0), seed(-700.0, 40.0), seed(-610.0, 35.0)]},
               "pendulum-star-4": {"task": "pendulum", "variant": "star", "budget": 4,
                                   "seeds": [seed(-300.0, 10.0), seed(-400.0, 8.0), seed(-290.0, 9.0)]}}
    rows = summarize(cfg, results)
    assert normalised(-600.0, -200.0, -1000.0) == 0.5
    pebble = [0.5, 0.5, (1000 - 610) / 800]
    star = [0.875, 1.0, (1000 - 290) / 800]
    assert rows["pendulum-pebble-4"]["normalized_return"] == pytest.approx(np.mean(pebble))
    assert rows["pendulum-star-4"]["normalized_return"] == pytest.approx(np.mean(star))
    assert rows["pendulum-star-4"]["normalized_return_std"] == pytest.approx(np.std(star, ddof=1))  # sample std
    assert rows["pendulum-oracle"]["normalized_return"] == 1.0 and rows["pendulum-oracle"]["pref_accuracy"] is None
    metrics = method_metrics(cfg, results, "tiny")
    assert not any("claim" in k or "above" in k for k in metrics.headline)
    assert metrics.headline["pendulum_4_star_minus_pebble"] == pytest.approx(np.mean(star) - np.mean(pebble))
    got = {c.name: c for c in metrics.claims}
    assert set(got) == {"star_above_random_continuous", "star_above_pebble_continuous",
                        "star_less_overestimation_continuous"}  # the variants this run has
    assert got["star_above_pebble_continuous"].verdict == "shown" and got["star_above_pebble_continuous"].seeds == 3
    assert got["star_above_random_continuous"].verdict == "shown" and got["star_above_random_continuous"].trivial
    assert got["star_above_random_continuous"].versus_mean == 0.0  # the random policy, normalised
    assert got["star_less_overestimation_continuous"].verdict == "shown"
    results["pendulum-star-4"]["seeds"][0]["overestimation_rel"] = 1.0  # STAR now overestimates more at one seed
    got = {c.name: c for c in method_metrics(cfg, results, "tiny").claims}
    assert got["star_above_pebble_continuous"].verdict == "shown"
    assert got["star_less_overestimation_continuous"].verdict == "inconclusive"
