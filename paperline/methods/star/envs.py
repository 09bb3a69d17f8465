"""The environments: gymnasium tasks made by id (checked before any training: an unknown id, a
package the task needs, a space the agent cannot take all fail here with a message naming them),
and the grid world of the discrete variant, a gymnasium environment registered as
`paperline/GridWorld-v0`.

The grid world (n × n, deterministic moves, start at the top-left corner, goal at the bottom-right):
the true reward of a step is 1 − d(s′, goal)/(2(n−1)) with d the Manhattan distance (1 at the goal,
which is absorbing until the time limit), so a scripted teacher's preference between segments is
informative everywhere; trap cells (a wall with one gap) end the episode with reward 0, forfeiting
the rest of it. Reaching the goal through the gap and staying there is optimal."""
from __future__ import annotations

import importlib
import os
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from paperline.io import DataError

GRID_ID = "paperline/GridWorld-v0"

# the paper profile's suites: a gymnasium id's prefix -> (the module whose import registers its ids,
# the package that brings it); gymnasium 1.x finds neither by itself
SUITES = {"dm_control/": ("shimmy", "shimmy[dm-control] with dm_control"),
          "Meta-World/": ("metaworld", "metaworld (with mujoco==3.3.0)")}


class EnvError(DataError):
    """An environment the run cannot use; the message names the id and what is wrong (bad input:
    `python -m flows run` exits 1 with it)."""


class GridWorld(gym.Env):
    metadata = {"render_modes": []}
    MOVES = ((-1, 0), (0, 1), (1, 0), (0, -1))  # up, right, down, left

    def __init__(self, size: int = 6):
        self.size = size
        self.observation_space = spaces.Discrete(size * size)
        self.action_space = spaces.Discrete(4)
        gap = size // 2
        self.traps = {(size // 2, c) for c in range(1, size) if c != gap}  # a wall of traps with one gap
        self.goal = (size - 1, size - 1)
        self.pos = (0, 0)

    def _index(self, pos: tuple[int, int]) -> int:
        return pos[0] * self.size + pos[1]

    def true_reward(self, pos: tuple[int, int]) -> float:
        return 1.0 - (abs(pos[0] - self.goal[0]) + abs(pos[1] - self.goal[1])) / (2 * (self.size - 1))

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.pos = (0, 0)
        return self._index(self.pos), {}

    def step(self, action: int):
        dr, dc = self.MOVES[int(action)]
        if self.pos != self.goal:  # the goal is absorbing
            self.pos = (min(max(self.pos[0] + dr, 0), self.size - 1), min(max(self.pos[1] + dc, 0), self.size - 1))
        if self.pos in self.traps:
            return self._index(self.pos), 0.0, True, False, {}
        return self._index(self.pos), self.true_reward(self.pos), False, False, {}


if GRID_ID not in gym.registry:
    gym.register(GRID_ID, entry_point=f"{__name__}:GridWorld")


@dataclass(frozen=True)
class EnvInfo:
    """What the agents need to know of a checked environment."""

    env_id: str
    kind: str  # "continuous" (SAC) | "discrete" (DQN)
    obs_dim: int  # features of an observation (discrete: the number of states)
    act_dim: int  # continuous: action dimensions; discrete: the number of actions
    low: np.ndarray | None = None
    high: np.ndarray | None = None

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """The action bounds (low, high) of a continuous task."""
        if self.low is None or self.high is None:
            raise ValueError(f"{self.env_id}: a {self.kind} task has no action bounds")
        return self.low, self.high

    @property
    def feature_dim(self) -> int:
        """Inputs of the reward model: (s, a) concatenated, one-hot for discrete spaces."""
        return self.obs_dim + self.act_dim

    def features(self, obs: np.ndarray, act: np.ndarray) -> np.ndarray:
        """Reward-model inputs from buffer rows obs [..., obs width] and act [..., act width]."""
        if self.kind == "continuous":
            return np.concatenate([obs, act], -1).astype(np.float32)
        s = np.eye(self.obs_dim, dtype=np.float32)[obs[..., 0].astype(np.int64)]
        a = np.eye(self.act_dim, dtype=np.float32)[act[..., 0].astype(np.int64)]
        return np.concatenate([s, a], -1)


def _register_suite(env_id: str) -> None:
    """Import the package that registers a paper-suite id (DMControl through shimmy, Meta-World)."""
    prefix = next((p for p in SUITES if env_id.startswith(p)), None)
    if prefix is None:
        return
    module, package = SUITES[prefix]
    if prefix == "dm_control/":
        # no rendering is needed: without this dm_control probes GLFW, which warns on a headless machine
        os.environ.setdefault("MUJOCO_GL", "disable")
        # dm_control 1.0.28 (the last one that takes metaworld's mujoco==3.3.0) calls np.in1d in its
        # quadruped task, which numpy 2.4 removed; 1.0.52 replaced it by this same isin(...).ravel()
        if not hasattr(np, "in1d"):
            setattr(np, "in1d", lambda ar1, ar2, assume_unique=False, invert=False: np.isin(  # noqa: B010
                ar1, ar2, assume_unique=assume_unique, invert=invert).ravel())
    try:
        importlib.import_module(module)
    except ImportError as err:
        raise EnvError(f"environment {env_id!r} is registered by {package}, which is not installed "
                       f"({err}); `make install` installs it") from None


def make_env(env_id: str, max_episode_steps: int, kwargs: dict | None = None) -> gym.Env:
    """gym.make with errors that name the id and the missing package. DMControl's dict observations
    are flattened into one vector (the agents take a 1-D Box). Meta-World ends its episodes at its own
    500 steps whatever max_episode_steps asks (its TimeLimit inside the one gymnasium adds)."""
    _register_suite(env_id)
    try:
        env = gym.make(env_id, max_episode_steps=max_episode_steps, **(kwargs or {}))
        if isinstance(env.observation_space, spaces.Dict) and env_id.startswith("dm_control/"):
            env = gym.wrappers.FlattenObservation(env)
        return env
    except gym.error.DependencyNotInstalled as err:
        raise EnvError(f"environment {env_id!r} needs a package that is not installed: {err}") from None
    except (gym.error.NameNotFound, gym.error.NamespaceNotFound, gym.error.VersionNotFound,
            gym.error.UnregisteredEnv) as err:
        raise EnvError(f"environment {env_id!r}: not a registered gymnasium environment: {err}") from None
    except TypeError as err:
        raise EnvError(f"environment {env_id!r}: bad env_kwargs {kwargs}: {err}") from None


def check_env(env_id: str, kind: str, kwargs: dict | None = None) -> EnvInfo:
    """Make the environment once and check that the `kind` of agent can take its spaces."""
    env = make_env(env_id, 10, kwargs)
    obs, act = env.observation_space, env.action_space
    env.close()
    if kind == "continuous":
        if not (isinstance(obs, spaces.Box) and len(obs.shape) == 1):
            raise EnvError(f"environment {env_id!r}: observation space {obs} is not one the continuous (SAC) "
                           "agent takes (a 1-D Box)")
        if not (isinstance(act, spaces.Box) and len(act.shape) == 1 and np.all(np.isfinite(act.low))
                and np.all(np.isfinite(act.high))):
            raise EnvError(f"environment {env_id!r}: action space {act} is not one the continuous (SAC) agent "
                           "takes (a 1-D Box with finite bounds)")
        return EnvInfo(env_id, kind, obs.shape[0], act.shape[0], act.low.astype(np.float32),
                       act.high.astype(np.float32))
    if not isinstance(obs, spaces.Discrete):
        raise EnvError(f"environment {env_id!r}: observation space {obs} is not one the discrete (DQN) agent "
                       "takes (Discrete states)")
    if not isinstance(act, spaces.Discrete):
        raise EnvError(f"environment {env_id!r}: action space {act} is not one the discrete (DQN) agent takes "
                       "(Discrete actions)")
    return EnvInfo(env_id, kind, int(obs.n), int(act.n))
