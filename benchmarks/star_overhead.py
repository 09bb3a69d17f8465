"""STAR's cost against plain SAC (the oracle variant) and PEBBLE, in this one process: the agent's
update time (median of rounds, round-robin over variants, after a warm-up round) on a buffer of
random Pendulum steps with a trained reward model, and environment steps per second of a whole
short run (feedback sessions, relabelling and evaluations included). Prints each variant's
ratio to the oracle's (plain SAC, or DQN on the grid). The spec reports STAR's overhead over
PEBBLE under 3% at the paper's scale (1024×2 networks on a GPU); on a small CPU network the extra
Q_ξ/V_ξ steps weigh far more.

    python benchmarks/star_overhead.py                 # 64×2 networks, batch 128 (the smoke profile's)
    python benchmarks/star_overhead.py --hidden 256 --batch 256 --task grid

`--pt`: instead, the offline Preference Transformer's fit (`offline.pt`), CPU and wall ms per
gradient step at each `--pt-sizes` embedding×batch (the module's other defaults: one causal block,
4 heads, dropout 0.1), on `--segment`-step segments of random Pendulum-shaped transitions:

    python benchmarks/star_overhead.py --pt            # embedding×batch 16×32, 32×64, 256×256 (paper)
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere in the checkout

import numpy as np  # noqa: E402
import torch  # noqa: E402

from paperline.methods.star.config import StarConfig  # noqa: E402
from paperline.methods.star.envs import GRID_ID, check_env, make_env  # noqa: E402
from paperline.methods.star.train import Run, train_run  # noqa: E402

VARIANTS = ("oracle", "pebble", "star")


def config(args) -> StarConfig:
    task = ({"name": "pendulum", "env_id": "Pendulum-v1", "kind": "continuous", "episode_steps": 200,
             "seed_steps": 200, "unsup_steps": 200, "segment": 50} if args.task == "pendulum" else
            {"name": "grid", "env_id": GRID_ID, "kind": "discrete", "env_kwargs": {"size": 6}, "episode_steps": 40,
             "seed_steps": 200, "segment": 10})
    return StarConfig.model_validate({
        "tasks": [task | {"steps": args.steps, "budgets": [20], "feedback_every": 400, "queries_per_session": 10,
                          "eval_every": args.steps, "eval_episodes": 1, "held_out_pairs": 50}],
        "variants": list(VARIANTS), "seeds": [0],
        "sac": {"hidden": args.hidden, "layers": 2, "batch": args.batch, "lr": 1e-3},
        "dqn": {"hidden": args.hidden, "layers": 2, "batch": args.batch},
        "reward": {"ensemble": 3, "hidden": 64, "layers": 2, "batch": 64, "updates": 20}})


def update_times(cfg: StarConfig, rounds: int, updates: int) -> dict[str, float]:
    """Seconds per agent update, median over rounds, on a filled buffer after one feedback session."""
    task = cfg.tasks[0]
    info = check_env(task.env_id, task.kind, task.env_kwargs)
    runs = {}
    for v in VARIANTS:
        run = Run(cfg, task, v, 20, 0, info)
        rng = np.random.default_rng(0)
        env = make_env(task.env_id, task.episode_steps, task.env_kwargs)
        for episode in range(max(2, 1000 // task.episode_steps)):
            obs, _ = env.reset(seed=episode)
            for t in range(task.episode_steps):
                a = (rng.uniform(info.low, info.high).astype(np.float32) if info.kind == "continuous"
                     else int(rng.integers(info.act_dim)))
                nxt, r, term, trunc, _ = env.step(a)
                run.buffer.add(np.atleast_1d(obs), np.atleast_1d(a), np.atleast_1d(nxt), r, r, term, episode, t)
                if run.graph is not None:
                    run.graph.add(int(obs), int(a), int(nxt), term, r)
                obs = nxt
                if term or trunc:
                    break
        run.progress["step"] = task.steps  # past every schedule threshold
        if run.flags["learned"]:
            run.feedback_session()
        runs[v] = run
    times = {v: [] for v in VARIANTS}
    for r in range(rounds + 1):
        for v, run in runs.items():
            start = time.perf_counter()
            for _ in range(updates):
                run.update()
            if r:  # round 0 warms up
                times[v].append((time.perf_counter() - start) / updates)
    return {v: statistics.median(t) for v, t in times.items()}


def pt_step_times(sizes: list[tuple[int, int]], segment: int, updates: int) -> dict[tuple[int, int], tuple[float, float]]:
    """(embedding, batch) -> (CPU s, wall s) per Preference Transformer fit step: a fit of 1 + `updates`
    steps less one of a single step (its build and first step), over `updates`, after a warm-up fit."""
    from paperline.methods.star import preference_transformer
    from paperline.rl.offline import PreferenceLabels, Transitions

    rng = np.random.default_rng(0)
    episodes, length = 15, 200  # the smoke's offline data: 15 Pendulum episodes
    n = episodes * length
    obs = rng.standard_normal((n, 3)).astype(np.float32)
    data = Transitions(obs=obs, act=rng.uniform(-2, 2, (n, 1)).astype(np.float32),
                       reward=rng.standard_normal(n).astype(np.float32), next_obs=obs,
                       terminal=np.zeros(n, np.float32), episode=np.repeat(np.arange(episodes), length),
                       t=np.tile(np.arange(length), episodes))
    starts = rng.choice(data.segment_starts(segment), size=(500, 2))
    labels = PreferenceLabels(start0=starts[:, 0], start1=starts[:, 1], y=rng.integers(0, 2, 500).astype(float))
    out = {}

    def fit_time(settings) -> np.ndarray:
        cpu, wall = time.process_time(), time.perf_counter()
        preference_transformer.fit(data, labels, segment, settings, seed=0)
        return np.array([time.process_time() - cpu, time.perf_counter() - wall])

    for embed, batch in sizes:
        settings = preference_transformer.PTSettings(embed=embed, batch=batch, updates=1)
        fit_time(settings)  # warm-up: torch's first calls at these shapes
        one = fit_time(settings)
        more = fit_time(settings.model_copy(update={"updates": 1 + updates}))
        out[(embed, batch)] = tuple((more - one) / updates)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=("pendulum", "grid"), default="pendulum")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=1200, help="environment steps of the timed whole runs")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--updates", type=int, default=100, help="agent updates per round")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--pt", action="store_true", help="time the Preference Transformer's fit steps instead")
    parser.add_argument("--pt-sizes", default="16x32,32x64,256x256", help="embedding×batch of each timed fit")
    parser.add_argument("--segment", type=int, default=50, help="segment length of the --pt fits (the smoke's)")
    parser.add_argument("--pt-updates", type=int, default=10, help="gradient steps of each --pt fit")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.pt:
        sizes = [tuple(int(x) for x in size.split("x")) for size in args.pt_sizes.split(",")]
        times = pt_step_times(sizes, args.segment, args.pt_updates)  # type: ignore[arg-type]
        print(f"Preference Transformer fit, {args.segment}-step segments, {args.pt_updates} steps a fit, "
              f"{args.threads} thread(s)")
        print(f"{'embedding':>9s} {'batch':>6s} {'CPU ms/step':>12s} {'wall ms/step':>13s}")
        for (embed, batch), (cpu, wall) in times.items():
            print(f"{embed:9d} {batch:6d} {1e3 * cpu:12.1f} {1e3 * wall:13.1f}")
        return 0
    cfg = config(args)
    per_update = update_times(cfg, args.rounds, args.updates)
    steps_per_s = {}
    for v in VARIANTS:
        start = time.perf_counter()
        train_run(cfg, cfg.tasks[0], v, None if v == "oracle" else 20, 0)
        steps_per_s[v] = args.steps / (time.perf_counter() - start)
    print(f"{args.task}, {args.hidden}x2 networks, batch {args.batch}, {args.threads} thread(s)")
    print(f"{'variant':8s} {'update ms':>10s} {'vs oracle':>9s} {'env steps/s':>12s} {'vs oracle':>9s}")
    for v in VARIANTS:
        print(f"{v:8s} {1e3 * per_update[v]:10.2f} {per_update[v] / per_update['oracle']:9.2f} "
              f"{steps_per_s[v]:12.0f} {steps_per_s[v] / steps_per_s['oracle']:9.2f}")
    print(f"STAR over PEBBLE: update time x{per_update['star'] / per_update['pebble']:.2f}, "
          f"steps/s x{steps_per_s['star'] / steps_per_s['pebble']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
