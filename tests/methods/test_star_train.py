"""The STAR training loop and its inputs: environments refused with their reason, the grid world's
dynamics, the relabelling buffer, a killed run resumed to the same result, the summary's rows and claims."""
from __future__ import annotations

import numpy as np
import pytest

from paperline.methods.star.config import StarConfig, row_name, runs_of
from paperline.methods.star.envs import GRID_ID, EnvError, GridWorld, check_env
from paperline.methods.star.evaluate import discounted_returns, evaluate, evaluate_with_overestimation, mc_steps
from paperline.methods.star.summary import method_metrics, normalised, summarize
from paperline.methods.star.train import train_run
from paperline.rl.buffer import ReplayBuffer

PENDULUM = {"name": "pendulum", "env_id": "Pendulum-v1", "kind": "continuous", "episode_steps": 20, "steps": 120,
            "seed_steps": 20, "unsup_steps": 20, "budgets": [4], "segment": 5, "feedback_every": 20,
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


class Constant:
    """Reward 1 every step, an episode of `limit` steps; observation: the step index."""

    def __init__(self, limit):
        self.limit = limit

    def reset(self, seed=None):
        self.t = 0
        return np.array([0.0]), {}

    def step(self, action):
        self.t += 1
        return np.array([float(self.t)]), 1.0, False, self.t >= self.limit, {}


def test_the_papers_overestimation_runs_the_first_episode_past_the_limit_and_scores_only_the_limit():
    gamma, steps = 0.5, 4
    extra = mc_steps(gamma, 0.01)  # 7: 0.5^7 < 0.01
    q = lambda obs, act: np.full(len(obs), 3.0)  # noqa: E731 (the true value is ~2: Q overestimates by ~1/2)
    got = evaluate_with_overestimation(Constant(steps + extra), lambda obs: 0.0, [0, 1], steps, extra, gamma, q)
    true = np.mean([sum(gamma ** k for k in range(steps + extra - t)) for t in range(steps)])
    assert got["return"] == 4.0 and got["return_std"] == 0.0  # the first episode's extra steps not scored
    assert got["q_mean"] == 3.0 and got["true_value"] == pytest.approx(true) and true > 1.99
    assert got["overestimation_true"] == pytest.approx(3.0 - true)
    assert got["overestimation_true_rel"] == pytest.approx((3.0 - true) / true)
    # a true value of ~0 (an episode of zero reward) leaves the relative figure undefined, not huge
    class Zero(Constant):
        def step(self, action):
            obs, _, term, trunc, info = super().step(action)
            return obs, 0.0, term, trunc, info

    zero = evaluate_with_overestimation(Zero(steps + extra), lambda obs: 0.0, [0], steps, extra, gamma, q)
    assert zero["overestimation_true"] == 3.0 and zero["overestimation_true_rel"] is None


def test_the_config_refuses_a_run_without_its_oracle_and_feedback_after_the_end():
    with pytest.raises(ValueError, match="oracle"):
        _cfg(variants=["pebble"])
    with pytest.raises(ValueError, match="feedback would start at step 220"):
        _cfg(tasks=[PENDULUM | {"seed_steps": 200}])
    names = [row_name(t.name, v, b) for t, v, b in runs_of(_cfg())]
    assert names == ["pendulum-oracle", "pendulum-pebble-4", "pendulum-star-4", "grid-oracle", "grid-pebble-4",
                     "grid-star-4"]


def test_pebbles_schedule_entropy_steps_after_the_seed_steps_and_no_session_at_the_last_step(monkeypatch):
    from paperline.methods.star import train

    # seed 20, 30 entropy steps: the first labels at step 50, sessions every 20 before step 120
    task = PENDULUM | {"unsup_steps": 30, "budgets": [8], "feedback_every": 20, "queries_per_session": 2,
                       "eval_every": 120}
    cfg = _cfg(tasks=[task], variants=["oracle", "pebble"])
    t = cfg.tasks[0]
    assert t.feedback_start == 50 and t.feedback_sessions() == 4  # at 50, 70, 90, 110
    entropy_batches = []
    knn = train.knn_entropy_reward
    monkeypatch.setattr(train, "knn_entropy_reward", lambda *a, **k: entropy_batches.append(1) or knn(*a, **k))
    result = train_run(cfg, t, "pebble", 8, 0)
    assert [s["step"] for s in result["reward_stats"]] == [50, 70, 90, 110]
    assert [s["labels"] for s in result["reward_stats"]] == [2, 4, 6, 8] and result["labels"] == 8
    # updates start after the seed steps; those before the first labels learn the entropy reward
    # (steps 21..49, as PEBBLE's loop: its step 50 relabels first)
    assert len(entropy_batches) == 29
    # a budget the schedule cannot spend is refused: 10 labels, 4 sessions of 2 before the last step
    # (one more session would fall on step 130 > 120; PEBBLE's loop holds none at the last step)
    with pytest.raises(ValueError, match="a budget of 10 labels cannot be spent: 4 sessions of 2"):
        _cfg(tasks=[task | {"budgets": [10]}])
    with pytest.raises(ValueError, match="cannot be spent: 5 sessions of 2"):  # 50, ..., 130 < 140
        _cfg(tasks=[task | {"budgets": [12], "steps": 140}])
    assert _cfg(tasks=[task | {"steps": 131}]).tasks[0].feedback_sessions() == 5  # 130 is before the last


def test_the_papers_score_is_the_success_rate_where_the_env_reports_one_else_the_ratio_to_the_oracle():
    from paperline.methods.star.evaluate import rollout
    from paperline.methods.star.summary import paper_score, ratio_to_oracle

    assert ratio_to_oracle(50.0, 200.0) == 0.25
    assert np.isnan(ratio_to_oracle(-400.0, -200.0)) and np.isnan(ratio_to_oracle(10.0, -1.2))  # a cost task
    # a success flag wins over the return, whatever the oracle's (Meta-World is scored by it)
    assert paper_score({"return": 10.0, "success": 0.4}, {"return": 900.0, "success": 1.0}) == 0.4

    class Succeeds:  # succeeds at step 2 of 4, then not: the episode counts as a success (PEBBLE's)
        def reset(self, seed=None):
            self.t = 0
            return np.zeros(1), {}

        def step(self, action):
            self.t += 1
            return np.zeros(1), 0.0, False, self.t == 4, {"success": float(self.t == 2)}

    assert rollout(Succeeds(), lambda obs: 0.0, 0, 10)["success"].tolist() == [0.0, 1.0, 0.0, 0.0]
    assert evaluate(Succeeds(), lambda obs: 0.0, [0], 4)["success"] == 1.0
    result = evaluate(Succeeds(), lambda obs: 0.0, [0, 1], 1)  # one step: never succeeds
    assert result["success"] == 0.0
    assert evaluate(GridWorld(4), lambda obs: 0, [0], 5)["success"] is None


def test_mrns_bilevel_step_moves_the_reward_model_through_the_critics_inner_step_only():
    import torch

    from paperline.methods.star.envs import check_env
    from paperline.methods.star.mrn import meta_reward_step
    from paperline.rl.reward_model import RewardEnsemble
    from paperline.rl.sac import SAC

    cfg = _cfg(tasks=[PENDULUM])
    info = check_env("Pendulum-v1", "continuous")
    g = torch.Generator().manual_seed(0)
    sac = SAC(info.obs_dim, info.act_dim, info.low, info.high, cfg.sac, g)
    model = RewardEnsemble(info.feature_dim, cfg.reward, g)
    rng = np.random.default_rng(0)
    batch = {"obs": rng.normal(size=(16, 3)).astype(np.float32), "act": rng.uniform(-2, 2, (16, 1)).astype(np.float32),
             "next_obs": rng.normal(size=(16, 3)).astype(np.float32), "terminated": np.zeros(16, np.float32)}
    segs = [(rng.normal(size=(6, 5, 3)).astype(np.float32), rng.uniform(-2, 2, (6, 5, 1)).astype(np.float32))
            for _ in range(2)]
    y = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 0.5])

    def weights(module):
        return [p.detach().clone() for p in module.parameters()]

    critic, reward = weights(sac.critic), weights(model)
    # an inner step of size 0: the outer loss does not depend on r̂, so the reward model stays
    meta_reward_step(model, sac, info.features, batch, segs[0], segs[1], y, inner_lr=0.0)
    assert all(torch.equal(a, b) for a, b in zip(reward, weights(model)))
    loss = meta_reward_step(model, sac, info.features, batch, segs[0], segs[1], y, inner_lr=0.1)
    assert np.isfinite(loss)
    assert any(not torch.equal(a, b) for a, b in zip(reward, weights(model)))  # through the inner step
    assert all(torch.equal(a, b) for a, b in zip(critic, weights(sac.critic)))  # the critic is not moved
    assert all(p.grad is None or not p.grad.any() for p in sac.critic.parameters())


def test_mrn_runs_as_a_variant_on_continuous_tasks_only():
    cfg = _cfg(tasks=[PENDULUM | {"budgets": [6]}], variants=["oracle", "mrn"], mrn={"outer_updates": 2, "batch": 8,
                                                                                      "pairs": 4})
    result = train_run(cfg, cfg.tasks[0], "mrn", 6, 0)
    sessions = result["reward_stats"]
    assert result["labels"] == 6 and len(sessions) == 3
    assert "mrn_loss" not in sessions[0]  # the first session's critic learned the entropy reward (it is reset)
    assert all(np.isfinite(s["mrn_loss"]) for s in sessions[1:])
    with pytest.raises(ValueError, match="task grid: MRN's inner step is SAC's critic"):
        _cfg(variants=["oracle", "mrn"])


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
    calls, curve_calls = [], []
    monkeypatch.setattr(train, "evaluate", lambda *a, **k: calls.append(1) or evaluate(*a, **k))
    monkeypatch.setattr(train, "evaluate_with_overestimation",
                        lambda *a, **k: curve_calls.append(1) or evaluate_with_overestimation(*a, **k))
    result = train_run(cfg, cfg.tasks[0], "oracle", None, 0)
    assert result["return"] == result["curve"]["return"][-1]
    assert len(curve_calls) == len(result["curve"]["step"]) and len(calls) == 1  # and the random policy's
    # the run's overestimation: the mean of the curve's from the first labels' step on (40: 60, 120)
    c = result["curve"]
    assert c["step"] == [60, 120] and cfg.tasks[0].feedback_start == 40
    assert result["overestimation_rel"] == pytest.approx(np.mean(c["overestimation_true_rel"]))
    assert result["overestimation"] == pytest.approx(np.mean(np.subtract(c["q_mean"], c["true_value"])))


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
    # the paper's score (R / R_oracle, no random floor) is undefined on a cost task: Pendulum has none
    assert rows["pendulum-star-4"]["paper_score"] is None and rows["pendulum-oracle"]["paper_score"] is None
    metrics = method_metrics(cfg, results, "tiny")
    assert metrics.primary_metric == "paper_score"
    assert metrics.headline["pendulum_4_star_minus_pebble_paper_score"] is None
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
