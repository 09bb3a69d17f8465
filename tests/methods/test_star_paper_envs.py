"""The paper profile's environments (DMControl through shimmy, Meta-World 3) are installed by the
project's own install and made through the STAR flow's code path: the data step's check_env, then
train_run's make_env, a few steps with the shapes the agents were built for. Not skipped when a
package is missing: `make test` must show it."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from paperline.methods.star.config import StarConfig
from paperline.methods.star.envs import SUITES, EnvError, check_env, make_env

PAPER = StarConfig.model_validate(
    yaml.safe_load((Path(__file__).parents[2] / "params" / "star.yaml").read_text())["star"]["profiles"]["paper"])


DMC = [t for t in PAPER.tasks if t.env_id.startswith("dm_control/")]
META_WORLD = [t for t in PAPER.tasks if t.env_id.startswith("Meta-World/")]


def test_the_paper_profile_has_both_suites():
    assert DMC and META_WORLD and len(DMC) + len(META_WORLD) == len(PAPER.tasks)


@pytest.mark.parametrize("task", DMC, ids=[t.name for t in DMC])
def test_a_dmcontrol_task_is_made_and_steps_with_the_checked_shapes(task):
    info = check_env(task.env_id, task.kind, task.env_kwargs)  # the flow's data step
    assert info.kind == "continuous" and info.obs_dim > 0 and np.all(info.low < info.high)
    env = make_env(task.env_id, task.episode_steps, task.env_kwargs)  # as train_run makes it
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (info.obs_dim,) and np.all(np.isfinite(obs))  # the dict observation, flattened
    for _ in range(3):
        obs, reward, terminated, truncated, _ = env.step(rng.uniform(info.low, info.high).astype(np.float32))
        assert obs.shape == (info.obs_dim,) and np.all(np.isfinite(obs)) and np.isfinite(reward)
        assert not (terminated or truncated)
    env.close()


def test_meta_world_tasks_are_checked_and_the_scripted_expert_presses_the_button():
    # making an MT1 environment resets its 50 goal variations (~1 s each make): every task is
    # checked as the data step does, one of them stepped (the scripted expert, to a success)
    from metaworld.policies import SawyerButtonPressV3Policy

    infos = {t.name: check_env(t.env_id, t.kind, t.env_kwargs) for t in META_WORLD}
    assert {(i.obs_dim, i.act_dim) for i in infos.values()} == {(39, 4)}  # hand, object, goal; xyz + grip
    task = next(t for t in META_WORLD if t.env_kwargs.get("env_name") == "button-press-v3")
    env = make_env(task.env_id, task.episode_steps, task.env_kwargs)
    obs, _ = env.reset(seed=0)
    policy, success = SawyerButtonPressV3Policy(), 0.0
    for _ in range(150):
        obs, reward, terminated, truncated, step_info = env.step(policy.get_action(obs))
        assert obs.shape == (39,) and np.isfinite(reward) and not (terminated or truncated)
        success = max(success, step_info["success"])
        if success:
            break
    assert success == 1.0
    # the evaluation the runs score Meta-World by (its success rate: the paper's score there)
    from paperline.methods.star.evaluate import evaluate

    assert evaluate(env, policy.get_action, [0], 150)["success"] == 1.0
    assert evaluate(env, lambda obs: np.zeros(4, np.float32), [0], 5)["success"] == 0.0
    env.close()


def test_a_suite_whose_package_is_missing_is_named(monkeypatch):
    monkeypatch.setitem(SUITES, "dm_control/", ("no_such_module", "shimmy[dm-control] with dm_control"))
    with pytest.raises(EnvError, match=r"'dm_control/cheetah-run-v0' is registered by shimmy\[dm-control\]"):
        check_env("dm_control/cheetah-run-v0", "continuous")
