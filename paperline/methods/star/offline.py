"""STAR's offline variant (spec (b)): the reward model fitted once on preference labels over a
fixed dataset (with PMR), the dataset relabelled with its mean, a value learned in-sample from
r̂, and the policy extracted by advantage-weighted regression (AWR, Peng et al. 2019):

    max_π E_{(s,a)∼D}[min(exp(β·A(s, a)), clip) · log π(a|s)].

The value, per variant (the data and the extraction are the same in all; the reward model too but
for `mr` and `pt`):
- `star`: STAR's Q_ξ/V_ξ (`ConservativeQ`: V_ξ by Gumbel regression, the soft in-sample max
  β log E_{a∼D} exp(Q_ξ/β), Q_ξ onto r̂ + γV_ξ(s′)); A = Q̄_ξ(s,a) − V_ξ(s). [I] The paper's
  offline recipe is one sentence ("the same Q_ξ/PR machinery, advantage-weighted extraction");
  AWR's exp(β·A) is the in-sample projection of PR's Boltzmann policy π̂ ∝ exp Q_ξ.
- `iql`: IQL (Kostrikov et al. 2022): V by expectile regression of Q (τ = 0.7), Q onto r̂ + γV(s′).
- `awr`: plain AWR: V regressed onto the discounted Monte-Carlo return of r̂ within each episode
  of the data; A = G − V(s).
- `mr`: the paper's offline MR baseline: IQL as `iql`, on a reward model of its own fitted on the
  same labels with the plain Bradley–Terry loss (hard targets, no margin regularisation): the one
  variant whose reward is not STAR's.
- `pt`: the paper's Preference Transformer baseline: IQL as `iql`, on the per-step rewards of a
  Preference Transformer fitted on the same labels (`preference_transformer.py`).

The embedded data (`generate`): rollouts of a random, a noisy-expert and the expert policy (the
oracle's true-reward SAC), written as a D4RL-style HDF5 file and Preference Transformer label
files (scripted-teacher labels), then read back through `paperline.rl.offline`'s loaders, the same
path a real D4RL/Minari file and PT's human labels take."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from paperline.methods.star import preference_transformer
from paperline.methods.star.config import OfflineConfig, StarConfig, TaskConfig
from paperline.methods.star.conservative import ConservativeQ
from paperline.methods.star.envs import EnvInfo, make_env
from paperline.methods.star.evaluate import discounted_returns, evaluate, rollout
from paperline.rl.nets import mlp
from paperline.rl.offline import (
    OfflineDataError,
    PreferenceLabels,
    Transitions,
    load_dataset,
    load_preference_labels,
    write_d4rl,
    write_preference_labels,
)
from paperline.rl.reward_model import RewardEnsemble
from paperline.rl.teacher import ScriptedTeacher, rational_labels
from paperline.train.records import finished_unit

QUALITIES = ("random", "noisy", "expert")


def offline_config(cfg: StarConfig) -> OfflineConfig:
    """The offline settings of a configuration that runs the offline variant."""
    if cfg.offline is None:
        raise ValueError("the configuration has no `offline` section")
    return cfg.offline


def awr_weights(adv: torch.Tensor, beta: float, clip: float) -> torch.Tensor:
    """min(exp(β·A), clip): AWR's (and IQL's) weights of the dataset actions."""
    return torch.exp(beta * adv).clamp(max=clip)


def expectile_loss(q: torch.Tensor, v: torch.Tensor, tau: float) -> torch.Tensor:
    """E[|τ − 1(q − v < 0)|·(q − v)²]: minimised over v at the τ-expectile of q (τ = ½: the mean)."""
    diff = q - v
    return (torch.abs(tau - (diff < 0).float()) * diff ** 2).mean()


class ExpectileQ(ConservativeQ):
    """IQL's value: ConservativeQ's in-sample Q/V pair with the expectile loss for V."""

    def __init__(self, *args, expectile: float, **kwargs):
        super().__init__(*args, **kwargs)
        self.expectile = expectile

    def value_loss(self, q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return expectile_loss(q, v, self.expectile)


class MonteCarloV(nn.Module):
    """Plain AWR's value: V(s) regressed onto the return G_t stored with each transition."""

    def __init__(self, obs_dim: int, hidden: int, layers: int, lr: float, generator: torch.Generator | None = None):
        super().__init__()
        self.v = mlp(obs_dim, hidden, layers, 1, generator=generator)
        self.opt = torch.optim.Adam(self.v.parameters(), lr=lr, fused=True)

    def update(self, batch: dict[str, np.ndarray]) -> dict[str, float]:
        obs, ret = torch.as_tensor(batch["obs"]), torch.as_tensor(batch["mc_return"])
        loss = F.mse_loss(self.v(obs).squeeze(-1), ret)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return {"v_loss": loss.item()}

    @torch.no_grad()
    def advantage(self, obs: torch.Tensor, ret: torch.Tensor) -> torch.Tensor:
        return ret - self.v(obs).squeeze(-1)


class GaussianPolicy(nn.Module):
    """π(a|s) = N(centre + scale·tanh(μ(s)), diag σ²) with a state-independent log σ (IQL's);
    the deterministic action is the mean."""

    scale: torch.Tensor  # buffers (register_buffer), typed for mypy
    centre: torch.Tensor

    def __init__(self, obs_dim: int, act_dim: int, hidden: int, layers: int, low: np.ndarray, high: np.ndarray,
                 generator: torch.Generator | None = None):
        super().__init__()
        self.net = mlp(obs_dim, hidden, layers, act_dim, generator=generator)
        self.log_std = nn.Parameter(torch.zeros(act_dim))
        self.register_buffer("scale", torch.as_tensor((high - low) / 2, dtype=torch.float32))
        self.register_buffer("centre", torch.as_tensor((high + low) / 2, dtype=torch.float32))

    def mean(self, obs: torch.Tensor) -> torch.Tensor:
        return self.centre + self.scale * torch.tanh(self.net(obs))

    def log_prob(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        std = (self.log_std.clamp(-5, 2).exp() * self.scale)
        return torch.distributions.Normal(self.mean(obs), std).log_prob(act).sum(-1)

    @torch.no_grad()
    def act(self, obs: np.ndarray) -> np.ndarray:
        return self.mean(torch.as_tensor(obs, dtype=torch.float32)[None])[0].numpy()


def awr_loss(policy: GaussianPolicy, obs: torch.Tensor, act: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """−E[w · log π(a|s)] (the weights are constants)."""
    return -(weights.detach() * policy.log_prob(obs, act)).mean()


# -- the embedded data -------------------------------------------------------------------------------

def generate(cfg: StarConfig, task: TaskConfig, info: EnvInfo, expert: Callable[[np.ndarray], np.ndarray], seed: int,
             out: Path) -> tuple[Path, Path, dict[str, float]]:
    """Roll out the three behaviour policies, write the D4RL-style file and PT's label files under
    `out`; returns their paths and each policy's mean true return in the data."""
    off = offline_config(cfg)
    rng = np.random.default_rng([seed, 10])
    low, high = info.bounds()
    half = (high - low) / 2
    policies = {
        "random": lambda obs: rng.uniform(low, high).astype(np.float32),
        "noisy": lambda obs: np.clip(expert(obs) + off.noise * half * rng.standard_normal(info.act_dim),
                                     low, high).astype(np.float32),
        "expert": expert,
    }
    env = make_env(task.env_id, task.episode_steps, task.env_kwargs)
    rows: dict[str, list] = {k: [] for k in ("obs", "act", "rew", "term", "timeout")}
    returns = {}
    for q, (quality, policy) in enumerate(policies.items()):
        quality_returns = []
        for e in range(off.episodes_per_policy):
            ep = rollout(env, policy, seed * 1_000_003 + 50_000 + 1000 * q + e, task.episode_steps)
            T = len(ep["reward"])
            rows["obs"].append(ep["obs"])
            rows["act"].append(ep["act"])
            rows["rew"].append(ep["reward"])
            rows["term"].append(np.eye(1, T, T - 1)[0] if ep["terminated"] else np.zeros(T))
            rows["timeout"].append(np.zeros(T) if ep["terminated"] else np.eye(1, T, T - 1)[0])
            quality_returns.append(float(ep["reward"].sum()))
        returns[quality] = float(np.mean(quality_returns))
    env.close()
    cat = {k: np.concatenate(v) for k, v in rows.items()}
    data_path = write_d4rl(out / "data.hdf5", cat["obs"], cat["act"], cat["rew"].astype(np.float32),
                          cat["term"].astype(bool), cat["timeout"].astype(bool))
    data = load_dataset(data_path)
    starts = data.segment_starts(off.segment)
    pairs = rng.choice(starts, size=(off.pairs, 2))
    teacher = ScriptedTeacher(cfg.teacher, np.random.default_rng([seed, 11]))
    y = teacher.label(*(data.reward[p[:, None] + np.arange(off.segment)] for p in (pairs[:, 0], pairs[:, 1])))
    labels_path = write_preference_labels(out / "labels", pairs[:, 0], pairs[:, 1], y)
    return data_path, labels_path, returns


def read_offline(data_path: Path, labels_path: Path, segment: int, info: EnvInfo
                 ) -> tuple[Transitions, PreferenceLabels]:
    """The dataset and its preference labels through the loaders, checked against the task's
    spaces. The flow's `data` step calls this on configured files before any training, so a
    missing field, a bad label or a wrong width is named first, not after the online rows."""
    data = load_dataset(data_path)
    labels = load_preference_labels(labels_path, data, segment)
    if data.obs.shape[1] != info.obs_dim or data.act.shape[1] != info.act_dim:
        raise OfflineDataError(f"{data_path}: observations/actions of width {data.obs.shape[1]}/{data.act.shape[1]}, "
                               f"but {info.env_id} has {info.obs_dim}/{info.act_dim}")
    return data, labels


# -- training ---------------------------------------------------------------------------------------

def _features(info: EnvInfo, data: Transitions, starts: np.ndarray, segment: int) -> np.ndarray:
    idx = starts[:, None] + np.arange(segment)
    return info.features(data.obs[idx], data.act[idx])


def held_out_pairs(data: Transitions, segment: int, n: int, rng: np.random.Generator
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`n` pairs of segments of the data drawn by `rng` (their starts, starts0 and starts1) and a
    noiseless teacher's labels of them (from their true returns): the pairs every offline reward
    model's held-out preference accuracy is measured on."""
    held = rng.choice(data.segment_starts(segment), size=(n, 2))
    r0, r1 = (data.reward[held[:, i, None] + np.arange(segment)].sum(-1) for i in (0, 1))
    return held[:, 0], held[:, 1], rational_labels(r0, r1)


def fit_reward(cfg: StarConfig, info: EnvInfo, data: Transitions, labels: PreferenceLabels, seed: int,
               generator: torch.Generator, pmr: bool = True) -> tuple[RewardEnsemble, float | None]:
    """The reward ensemble fitted once on every label (PMR's smoothed targets, ε of `star`; `pmr`
    False: the plain Bradley–Terry loss), and its preference accuracy on held-out pairs of the data
    labelled by a noiseless teacher."""
    off = offline_config(cfg)
    settings = cfg.reward.model_copy(update={"updates": off.reward_updates})
    model = RewardEnsemble(info.feature_dim, settings, generator, pmr_eps=cfg.star.pmr_eps if pmr else 0.0)
    rng = np.random.default_rng([seed, 12])
    model.train_session(_features(info, data, labels.start0, off.segment),
                        _features(info, data, labels.start1, off.segment), labels.y, rng)
    held0, held1, y = held_out_pairs(data, off.segment, off.held_out_pairs, rng)
    accuracy = model.accuracy(_features(info, data, held0, off.segment), _features(info, data, held1, off.segment), y)
    return model, None if math.isnan(accuracy) else accuracy


def mc_returns(data: Transitions, reward: np.ndarray, gamma: float) -> np.ndarray:
    """Discounted return of `reward` to the end of each transition's episode in the data."""
    out = np.zeros(len(data), np.float32)
    for e in np.unique(data.episode):
        rows = np.flatnonzero(data.episode == e)
        out[rows] = discounted_returns(reward[rows], gamma)
    return out


def train_variant(variant: str, off: OfflineConfig, gamma: float, beta: float, tau: float, target_every: int,
                  info: EnvInfo, data: Transitions, reward: np.ndarray, seed: int, progress: bool = False
                  ) -> GaussianPolicy:
    """The value of `variant` and the AWR policy, trained side by side for `off.steps` steps on
    batches of the data (rewards: r̂). Its own random streams (from `seed`): the same policy
    whichever variants ran before it, which the variant-level resume of `run_offline` relies on."""
    g = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng([seed, 13])
    policy = GaussianPolicy(info.obs_dim, info.act_dim, off.hidden, off.layers, *info.bounds(), g)
    policy_opt = torch.optim.Adam(policy.parameters(), lr=off.lr, fused=True)
    value: MonteCarloV | ConservativeQ
    if variant == "awr":
        value = MonteCarloV(info.obs_dim, off.hidden, off.layers, off.lr, g)
        ret = mc_returns(data, reward, gamma)
    elif variant == "star":
        value = ConservativeQ(info.obs_dim, info.act_dim, off.hidden, off.layers, off.lr, beta, gamma, tau, target_every,
                              g)
    else:
        value = ExpectileQ(info.obs_dim, info.act_dim, off.hidden, off.layers, off.lr, beta, gamma, tau, target_every,
                           g, expectile=off.expectile)
    steps = range(off.steps)
    if progress:
        from tqdm import tqdm

        steps = tqdm(steps, desc=f"offline-{variant}-s{seed}", leave=False)
    for _ in steps:
        idx = rng.integers(0, len(data), off.batch)
        batch = data.batch(idx) | {"reward": reward[idx]}
        obs, act = torch.as_tensor(batch["obs"]), torch.as_tensor(batch["act"])
        if variant == "awr":
            batch["mc_return"] = ret[idx]
            value.update(batch)
            adv = value.advantage(obs, torch.as_tensor(ret[idx]))
        else:
            value.update(batch)
            adv = value.advantage(obs, act)
        loss = awr_loss(policy, obs, act, awr_weights(adv, off.awr_beta, off.weight_clip))
        policy_opt.zero_grad()
        loss.backward()
        policy_opt.step()
    return policy


def extraction_fingerprint(cfg: StarConfig, task: TaskConfig, seed: int, variant: str) -> dict:
    """The key of one extraction's finished-unit record: the seed, the task and every setting of the
    run (the data's, the reward models', the extraction's), and the variant. The whole settings, not
    only the ones `variant` reads: the run directory is cleared on any config change
    (tasks/resume.py: open_run_dir), so a record only ever meets its own run's settings."""
    return {"seed": seed, "task": task.model_dump(), "offline": offline_config(cfg).model_dump(),
            "sac": cfg.sac.model_dump(), "reward": cfg.reward.model_dump(), "star": cfg.star.model_dump(),
            "teacher": cfg.teacher.model_dump(), "variant": variant}


def run_offline(cfg: StarConfig, task: TaskConfig, info: EnvInfo, expert: Callable[[np.ndarray], np.ndarray],
                seed: int, out: Path, progress: bool = False, device: torch.device | str = "cpu") -> dict:
    """One seed of the offline comparison: the data (generated or the configured files), the
    reward model once, every variant, each evaluated with the true reward against the expert
    (the oracle's SAC) and a random policy on the same episodes.

    A killed run resumes variant by variant: each finished variant's evaluation is a finished-unit
    record (`out/variants/<variant>.json`, keyed by `extraction_fingerprint`); a rerun regenerates the data and refits STAR's and MR's reward
    models (deterministic in the seed, and cheap beside the extractions) and trains only the
    variants not recorded, to the same results; the Preference Transformer, whose fit is not cheap,
    is fitted only with its extraction (its accuracy recorded with it). `device`: where the
    Preference Transformer (`pt`) is fitted; the rest runs on the CPU."""
    off = offline_config(cfg)
    behaviour = None
    if off.dataset is None:
        data_path, labels_path, behaviour = generate(cfg, task, info, expert, seed, Path(out))
    elif off.labels is not None:  # the configuration takes both files or neither
        data_path, labels_path = Path(off.dataset), Path(off.labels)
    else:
        raise ValueError("offline: `dataset` without `labels`")
    data, labels = read_offline(data_path, labels_path, off.segment, info)
    generator = torch.Generator().manual_seed(seed)
    model, accuracy = fit_reward(cfg, info, data, labels, seed, generator)
    reward = model.mean_reward(info.features(data.obs, data.act)).astype(np.float32)
    rewards: dict[str, np.ndarray] = {v: reward for v in off.variants if v not in ("mr", "pt")}
    mr_accuracy: float | None = None
    if "mr" in off.variants:  # its own generator: the other variants' results do not depend on it
        plain, mr_accuracy = fit_reward(cfg, info, data, labels, seed, torch.Generator().manual_seed(seed), pmr=False)
        rewards["mr"] = plain.mean_reward(info.features(data.obs, data.act)).astype(np.float32)
    eval_env = make_env(task.env_id, task.episode_steps, task.env_kwargs)
    seeds = [20_000 + 97 * i for i in range(off.eval_episodes)]
    rng = np.random.default_rng([seed, 14])
    expert_return = evaluate(eval_env, expert, seeds, task.episode_steps)["return"]
    random_return = evaluate(eval_env, lambda obs: rng.uniform(*info.bounds()).astype(np.float32), seeds,
                             task.episode_steps)["return"]
    s = cfg.sac

    def extract(v: str) -> dict:
        policy = train_variant(v, off, s.gamma, cfg.star.beta, s.tau, s.target_every, info, data, rewards[v], seed,
                               progress)
        return evaluate(eval_env, policy.act, seeds, task.episode_steps)

    def extract_pt() -> dict:
        """PT fitted (every draw of its own from the seed, as `mr`'s model) and extracted, and its
        held-out accuracy, recorded with the extraction: a recorded one is neither refitted nor
        retrained."""
        pt = preference_transformer.fit(data, labels, off.segment, off.pt, seed, device)
        held = held_out_pairs(data, off.segment, off.held_out_pairs, np.random.default_rng([seed, 16]))
        pt_held = preference_transformer.accuracy(pt, data, *held, off.segment)
        rewards["pt"] = preference_transformer.relabel(pt, data, off.segment)
        return {"evaluation": extract("pt"), "pref_accuracy": None if math.isnan(pt_held) else pt_held}

    variants: dict[str, dict] = {}
    pt_accuracy: float | None = None
    for v in off.variants:
        record, key = Path(out) / "variants" / f"{v}.json", extraction_fingerprint(cfg, task, seed, v)
        if v == "pt":
            pt_result = finished_unit(record, key, extract_pt)
            variants[v], pt_accuracy = pt_result["evaluation"], pt_result["pref_accuracy"]
        else:
            variants[v] = finished_unit(record, key, lambda: extract(v))
    eval_env.close()
    return {"variants": variants, "expert_return": expert_return, "random_return": random_return,
            "pref_accuracy": accuracy, "mr_pref_accuracy": mr_accuracy, "pt_pref_accuracy": pt_accuracy,
            "labels": len(labels.y), "transitions": len(data),
            "behaviour_returns": behaviour, "dataset_return": float(data.episode_returns().mean())}
