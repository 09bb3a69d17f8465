"""One run: a (task, variant, feedback budget, seed) trained online, evaluated with the true reward.

The loop (PEBBLE, Lee et al. 2021, with STAR's regularisers switched by the variant):
1. `seed_steps` uniform random actions; continuous tasks then run PEBBLE's unsupervised
   pre-training (SAC on the state-entropy reward) for `unsup_steps` steps;
2. from then on, every `feedback_every` steps until the budget is spent (none at the last step,
   which no update follows), a feedback session: the
   `queries_per_session` pairs of segments the reward ensemble disagrees on most (of
   `candidates_factor` times as many uniform pairs), labelled by the scripted teacher, the reward
   model trained on every label so far (PMR's smoothed targets for STAR), and every stored reward
   relabelled with its mean (the graph's edges too); after the first session SAC's critics restart
   (PEBBLE's reset after pre-training);
3. every step one agent update; with PR, continuous: Q_ξ's in-sample step and the actor's η·KL term;
   discrete: the graph Q̂'s KL term, the graph re-solved at the end of each episode (spec (g)).
The oracle learns from the true reward from the start. Evaluations every `eval_every` steps make
the learning curve and measure the critic's overestimation against the true return (the paper's
way, `evaluate.evaluate_with_overestimation`); the run's `overestimation(_rel)` is its mean over the
points from the first labels on (every variant, the oracle too, over the same steps). At the end: a
random policy's return (the normaliser's floor) and the reward model's preference accuracy on
held-out pairs.

A run checkpoints at episode ends (agent, buffer, reward models, Q_ξ or graph, teacher with its
query count, random streams, curve) and a killed run resumes to the same result; environments are
reset with seeds derived from the episode index, so nothing of them needs saving."""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import torch

from paperline.methods.star.config import VARIANTS, StarConfig, TaskConfig
from paperline.methods.star.conservative import ConservativeQ
from paperline.methods.star.envs import EnvInfo, check_env, make_env
from paperline.methods.star.evaluate import evaluate, evaluate_with_overestimation, mc_steps
from paperline.methods.star.graph import TransitionGraph, seen_softmax_kl
from paperline.methods.star.mrn import meta_reward_step
from paperline.rl.buffer import ReplayBuffer
from paperline.rl.dqn import DQN
from paperline.rl.exploration import RunningStd, knn_entropy_reward
from paperline.rl.reward_model import RewardEnsemble
from paperline.rl.sac import SAC
from paperline.rl.teacher import ScriptedTeacher, rational_labels
from paperline.train.checkpoint import Resumable

ENTROPY_REFERENCE = 4096  # buffer states the k-NN entropy reward compares against (a random subset)


class Run:
    """The state of one run: everything a checkpoint holds."""

    def __init__(self, cfg: StarConfig, task: TaskConfig, variant: str, budget: int | None, seed: int, info: EnvInfo,
                 device: torch.device | str = "cpu"):
        self.cfg, self.task, self.variant, self.info = cfg, task, variant, info
        self.flags = VARIANTS[variant]
        self.budget = budget or 0
        self.generator = torch.Generator().manual_seed(seed)
        self.rng = np.random.default_rng([seed, 0])
        self.continuous = info.kind == "continuous"
        self.agent: SAC | DQN
        if self.continuous:
            self.agent = SAC(info.obs_dim, info.act_dim, *info.bounds(), cfg.sac, self.generator)
            self.gamma = cfg.sac.gamma
            self.buffer = ReplayBuffer(task.steps, info.obs_dim, info.act_dim)
        else:
            self.agent = DQN(info.obs_dim, info.act_dim, cfg.dqn, self.generator)
            self.gamma = cfg.dqn.gamma
            self.buffer = ReplayBuffer(task.steps, 1, 1)
        self.reward_model = (RewardEnsemble(info.feature_dim, cfg.reward, self.generator,
                                            pmr_eps=cfg.star.pmr_eps if self.flags["pmr"] else 0.0,
                                            surf=cfg.surf if self.flags["surf"] else None)
                             if self.flags["learned"] else None)
        self.teacher = ScriptedTeacher(cfg.teacher, np.random.default_rng([seed, 1]))
        pr = self.flags["pr"]
        s = cfg.sac
        self.cq = (ConservativeQ(info.obs_dim, info.act_dim, s.hidden, s.layers, s.lr, cfg.star.beta, s.gamma, s.tau,
                                 s.target_every, self.generator) if pr and self.continuous else None)
        self.graph = TransitionGraph(info.act_dim) if pr and not self.continuous else None
        for module in (self.agent, self.reward_model, self.cq):  # weights drawn on the CPU, then moved
            if module is not None:
                module.to(device)
        self.device = torch.device(device)
        self.entropy = RunningStd()
        self.labels = {"i0": np.zeros(0, np.int64), "i1": np.zeros(0, np.int64), "y": np.zeros(0)}
        # JSON-like: saved and restored with the checkpoint
        self.progress: dict[str, Any] = {"step": 0, "episode": 0, "sessions": 0,
                         "curve": {"step": [], "return": [], "q_mean": [], "true_value": [],
                                   "overestimation_true_rel": []},
                         "reward_stats": []}

    # -- checkpoint -------------------------------------------------------------------------------
    def modules(self) -> dict:
        out: dict[str, Any] = {"agent": self.agent, "generator": self.generator}
        if isinstance(self.agent, SAC):
            out |= self.agent.optimizers()
        else:
            out["agent_opt"] = self.agent.opt
        if self.reward_model is not None:
            out |= {"reward_model": self.reward_model, "reward_opt": self.reward_model.opt}
        if self.cq is not None:
            out |= {"cq": self.cq, "cq_q_opt": self.cq.q_opt, "cq_v_opt": self.cq.v_opt}
        return out

    def snapshot(self) -> dict:
        return self.progress | {"buffer": self.buffer.state_dict(), "teacher": self.teacher.state_dict(),
                                "rng": self.rng.bit_generator.state, "entropy": self.entropy.state_dict(),
                                "labels": {k: v.copy() for k, v in self.labels.items()},
                                "graph": self.graph.state_dict() if self.graph is not None else None}

    def restore(self, saved: dict) -> None:
        self.buffer.load_state_dict(saved["buffer"])
        self.teacher.load_state_dict(saved["teacher"])
        self.rng.bit_generator.state = saved["rng"]
        self.entropy.load_state_dict(saved["entropy"])
        self.labels = saved["labels"]
        if self.graph is not None:
            self.graph.load_state_dict(saved["graph"])
        self.progress = {k: saved[k] for k in self.progress}

    # -- acting -----------------------------------------------------------------------------------
    def act(self, obs) -> np.ndarray | int:
        step = self.progress["step"]
        if step < self.task.seed_steps:
            if self.continuous:
                return self.rng.uniform(*self.info.bounds()).astype(np.float32)
            return int(self.rng.integers(self.info.act_dim))
        if isinstance(self.agent, SAC):
            return self.agent.act(obs)
        return self.agent.act(int(obs), self.rng, self.agent.epsilon(step - self.task.seed_steps))

    def greedy(self, obs):
        if isinstance(self.agent, SAC):
            return self.agent.act(obs, deterministic=True)
        return self.agent.act(int(obs), self.rng, 0.0)

    def q_fn(self, obs: np.ndarray, act: np.ndarray) -> np.ndarray:
        if isinstance(self.agent, SAC):
            return self.agent.q_value(obs, act)
        return self.agent.q_value(obs[:, 0], act[:, 0])

    @property
    def rewards(self) -> RewardEnsemble:
        """The reward model (the preference variants')."""
        if self.reward_model is None:
            raise ValueError(f"variant {self.variant} learns no reward model")
        return self.reward_model

    def learned_reward(self, obs: np.ndarray, act: np.ndarray) -> np.ndarray:
        return self.rewards.mean_reward(self.info.features(obs, act))

    @property
    def has_reward_model(self) -> bool:
        return self.progress["sessions"] > 0

    # -- feedback ---------------------------------------------------------------------------------
    def _segments(self, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Reward-model features [n, H, d] and true rewards [n, H] of segments starting at `starts`."""
        idx = starts[:, None] + np.arange(self.task.segment)
        b = self.buffer
        return self.info.features(b.obs[idx], b.act[idx]), b.true_reward[idx]

    def feedback_session(self) -> bool:
        """Query, label, train the reward model, relabel. False when no segments exist yet."""
        task = self.task
        starts = self.buffer.segment_starts(task.segment)
        if len(starts) < 2:
            return False
        n = min(task.queries_per_session, self.budget - self.teacher.queries)
        cand = self.rng.choice(starts, size=(n * task.candidates_factor, 2))
        if self.has_reward_model:  # PEBBLE's disagreement sampling (the first session: uniform)
            f0, _ = self._segments(cand[:, 0])
            f1, _ = self._segments(cand[:, 1])
            cand = cand[np.argsort(-self.rewards.disagreement(f0, f1), kind="stable")[:n]]
        else:
            cand = cand[:n]
        _, r0 = self._segments(cand[:, 0])
        _, r1 = self._segments(cand[:, 1])
        y = self.teacher.label(r0, r1)
        self.labels = {"i0": np.concatenate([self.labels["i0"], cand[:, 0]]),
                       "i1": np.concatenate([self.labels["i1"], cand[:, 1]]), "y": np.concatenate([self.labels["y"], y])}
        f0, _ = self._segments(self.labels["i0"])
        f1, _ = self._segments(self.labels["i1"])
        unlabelled = None
        if self.flags["surf"]:
            pool = self.rng.choice(starts, size=(self.cfg.reward.batch * self.cfg.surf.unlabelled_ratio, 2))
            unlabelled = (self._segments(pool[:, 0])[0], self._segments(pool[:, 1])[0])
        stats = self.rewards.train_session(f0, f1, self.labels["y"], self.rng, unlabelled)
        if self.flags["mrn"] and self.has_reward_model:  # the critic has learned r̂ (the first one is reset)
            stats["mrn_loss"] = self._mrn_steps()
        self.buffer.relabel(self.learned_reward)
        if self.graph is not None:
            self.graph.relabel(lambda s, a: self.learned_reward(s[:, None].astype(np.float32),
                                                                a[:, None].astype(np.float32)))
            self.graph.value_iteration(self.gamma, self.cfg.star.graph_tol)
        if self.progress["sessions"] == 0 and isinstance(self.agent, SAC) and task.unsup_steps > 0:
            self.agent.reset_critic()  # PEBBLE: the critic of the entropy phase is discarded
        self.progress["sessions"] += 1
        self.progress["reward_stats"].append({"step": self.progress["step"], "labels": self.teacher.queries, **stats})
        return True

    def _mrn_steps(self) -> float:
        """MRN's bi-level steps of the reward model through SAC's critic; the mean outer loss."""
        m, b, sac = self.cfg.mrn, self.buffer, self.agent
        if not isinstance(sac, SAC):
            raise ValueError("MRN's inner step is SAC's critic")
        losses = []
        for _ in range(m.outer_updates):
            pick = self.rng.integers(0, len(self.labels["y"]), min(m.pairs, len(self.labels["y"])))
            segs = [self.labels[k][pick][:, None] + np.arange(self.task.segment) for k in ("i0", "i1")]
            losses.append(meta_reward_step(self.rewards, sac, self.info.features,
                                           b.sample(self.rng, m.batch), (b.obs[segs[0]], b.act[segs[0]]),
                                           (b.obs[segs[1]], b.act[segs[1]]), self.labels["y"][pick], m.inner_lr))
        return float(np.mean(losses))

    def feedback_due(self) -> bool:
        if not self.flags["learned"] or self.teacher.queries >= self.budget:
            return False
        start = self.task.feedback_start
        step = self.progress["step"]
        if step >= self.task.steps:
            return False
        return step >= start and (step - start) % self.task.feedback_every == 0 or (
            step > start and not self.has_reward_model)  # postponed: no full segment yet

    # -- learning ---------------------------------------------------------------------------------
    def update(self) -> None:
        batch = self.buffer.sample(self.rng, self.cfg.sac.batch if self.continuous else self.cfg.dqn.batch)
        agent = self.agent
        if isinstance(agent, SAC):
            if self.flags["learned"] and not self.has_reward_model:  # PEBBLE's unsupervised phase
                ref = self.buffer.obs[self.rng.choice(self.buffer.size, min(ENTROPY_REFERENCE, self.buffer.size),
                                                      replace=False)]
                intrinsic = knn_entropy_reward(batch["next_obs"], ref)
                self.entropy.update(intrinsic)
                batch["reward"] = self.entropy.normalise(intrinsic).astype(np.float32)
                agent.update(batch)
                return
            actor_term = None
            if self.cq is not None:
                self.cq.update(batch)
                actor_term = self.cq.actor_term(self.cfg.star.eta)
            agent.update(batch, actor_term)
            return
        if self.flags["learned"] and not self.has_reward_model:
            return  # nothing to learn from before the first labels
        graph, extra = self.graph, None
        if graph is not None and graph.solved:
            def extra() -> torch.Tensor:
                states, q_hat, mask = graph.kl_batch(self.rng, self.cfg.star.graph_batch)
                q_theta = agent.q_values(states)
                return self.cfg.star.eta * seen_softmax_kl(torch.as_tensor(q_hat, device=self.device), q_theta,
                                                           torch.as_tensor(mask, device=self.device))
        agent.update(batch, extra)


def train_run(cfg: StarConfig, task: TaskConfig, variant: str, budget: int | None, seed: int,
              checkpoint=None, progress: bool = False, on_eval: Callable[[int, float], None] | None = None,
              device: torch.device | str = "cpu") -> dict:
    """Train one run (resuming from `checkpoint` when it holds this run's state) and evaluate it.
    The networks live on `device`; the environment, the buffer and the graph on the CPU."""
    info = check_env(task.env_id, task.kind, task.env_kwargs)
    run = Run(cfg, task, variant, budget, seed, info, device)
    env = make_env(task.env_id, task.episode_steps, task.env_kwargs)
    extra = mc_steps(run.gamma, cfg.mc_tail)
    eval_env = make_env(task.env_id, task.episode_steps + extra, task.env_kwargs)
    eval_seeds = [10_000 + 97 * i for i in range(task.eval_episodes)]
    fingerprint = {"cfg": cfg.model_dump(), "task": task.name, "variant": variant, "budget": budget, "seed": seed}
    saver = Resumable(checkpoint, fingerprint, **run.modules())
    saved = saver.resume()
    if saved is not None:
        run.restore(saved)
    p = run.progress
    last_eval = None  # the curve's evaluation at the last step is the final one (the same greedy episodes)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=task.steps, initial=p["step"], desc=f"{task.name}-{variant}-{budget}-s{seed}", leave=False)
    while p["step"] < task.steps:
        obs, _ = env.reset(seed=seed * 1_000_003 + p["episode"])
        for t in range(task.episode_steps):
            action = run.act(obs)
            nxt, true_r, terminated, truncated, _ = env.step(action)
            if run.flags["learned"]:
                r = (float(run.learned_reward(np.atleast_1d(obs)[None].astype(np.float32),
                                              np.atleast_1d(action)[None].astype(np.float32))[0])
                     if run.has_reward_model else 0.0)
            else:
                r = float(true_r)
            run.buffer.add(np.atleast_1d(obs), np.atleast_1d(action), np.atleast_1d(nxt), float(true_r), r, terminated,
                           p["episode"], t)
            if run.graph is not None:
                run.graph.add(int(obs), int(action), int(nxt), terminated, r)
            p["step"] += 1
            if bar is not None:
                bar.update(1)
            if run.feedback_due():
                run.feedback_session()
            if p["step"] > task.seed_steps:
                for _ in range(task.updates_per_step):
                    run.update()
            if p["step"] % task.eval_every == 0 or p["step"] == task.steps:
                last_eval = evaluate_with_overestimation(eval_env, run.greedy, eval_seeds, task.episode_steps, extra,
                                                         run.gamma, run.q_fn)
                value = last_eval["return"]
                p["curve"]["step"].append(p["step"])
                for k in ("return", "q_mean", "true_value", "overestimation_true_rel"):
                    p["curve"][k].append(last_eval[k])
                if on_eval is not None:
                    on_eval(p["step"], value)
            obs = nxt
            if terminated or truncated or p["step"] == task.steps:
                break
        p["episode"] += 1
        if run.graph is not None and run.has_reward_model:
            run.graph.value_iteration(run.gamma, cfg.star.graph_tol)
        if p["episode"] % cfg.checkpoint_every_episodes == 0 or p["step"] == task.steps:
            saver.save(run.snapshot())
    if bar is not None:
        bar.close()
    return _final(run, eval_env, eval_seeds, seed, last_eval) | {"seconds": saver.elapsed()}


def load_agent(cfg: StarConfig, task: TaskConfig, variant: str, budget: int | None, seed: int, checkpoint,
               device: torch.device | str = "cpu") -> tuple[SAC | DQN, EnvInfo]:
    """The trained agent of a finished run from its checkpoint (the offline variant's expert
    behaviour policy is the oracle's SAC)."""
    from paperline.train.checkpoint import load_checkpoint

    info = check_env(task.env_id, task.kind, task.env_kwargs)
    saved = load_checkpoint(checkpoint)
    if saved is None:
        raise FileNotFoundError(f"{checkpoint}: no checkpoint of {task.name}-{variant} seed {seed}")
    run = Run(cfg, task, variant, budget, seed, info, device)
    run.agent.load_state_dict(saved["state"]["agent"])
    return run.agent, info


def _final(run: Run, eval_env, eval_seeds: list[int], seed: int, final: dict[str, float | None] | None = None) -> dict:
    """`final`: the greedy evaluation at the last step when the loop made it (a run resumed after its
    last step did not): evaluating again would play the same episodes."""
    task, p = run.task, run.progress
    curve = p["curve"]
    final = dict(final) if final is not None else evaluate(eval_env, run.greedy, eval_seeds, task.episode_steps)
    # the paper's overestimation over training, from the first labels on (the oracle's over the same steps)
    late = [i for i, step in enumerate(curve["step"]) if step >= task.feedback_start]
    gaps = [curve["q_mean"][i] - curve["true_value"][i] for i in late]
    rel = [curve["overestimation_true_rel"][i] for i in late if curve["overestimation_true_rel"][i] is not None]
    rng = np.random.default_rng([seed, 2])
    random_policy: Callable[[Any], np.ndarray | int]
    if run.continuous:
        random_policy = lambda obs: rng.uniform(*run.info.bounds()).astype(np.float32)  # noqa: E731
    else:
        random_policy = lambda obs: int(rng.integers(run.info.act_dim))  # noqa: E731
    random_eval = evaluate(eval_env, random_policy, eval_seeds, task.episode_steps)
    accuracy = None
    if run.flags["learned"] and run.has_reward_model:
        starts = run.buffer.segment_starts(task.segment)
        pairs = rng.choice(starts, size=(task.held_out_pairs, 2))
        f0, r0 = run._segments(pairs[:, 0])
        f1, r1 = run._segments(pairs[:, 1])
        accuracy = run.rewards.accuracy(f0, f1, rational_labels(r0.sum(-1), r1.sum(-1)))
        accuracy = None if math.isnan(accuracy) else accuracy
    return {"return": final["return"], "return_std": final["return_std"], "random_return": random_eval["return"],
            "success": final.get("success"), "random_success": random_eval["success"],
            "overestimation": float(np.mean(gaps)) if gaps else None,
            "overestimation_rel": float(np.mean(rel)) if rel else None,
            "pref_accuracy": accuracy, "labels": run.teacher.queries, "curve": p["curve"],
            "reward_stats": p["reward_stats"], "steps": p["step"]}
