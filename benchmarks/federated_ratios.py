"""The two systems claims of issue 26 as ratios against their synchronous baselines, in one run:

- LEFF: per-client compute (FLOPs by torch's FlopCounterMode, and wall seconds of the ClientApp's
  train step) against FedAvg full fine-tuning, from one Flower simulation of the two methods at the
  smoke profile (fewer rounds), through the stage's own ServerApp/ClientApp (fed.run_federated) and
  its summary (summary.row / summary.headline).
- PubSub-VFL: per-worker waiting time (seconds and fraction of the worker's wall) against
  synchronous VFL (and VFL-PS), over the stage's zmq channels and party processes
  (train.run_variant), the smoke data, the same workers and batch size for both PS variants,
  planner-free, seeds alternating so a slow spell of the machine hits every variant alike.

    .venv/bin/python benchmarks/federated_ratios.py                   # ~1.5 min on 2 cores
    .venv/bin/python benchmarks/federated_ratios.py --rounds 3 --seeds 0 1 2 --baselines vfl vfl_ps
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("FLWR_HOME", str(ROOT / ".flwr"))  # project-local, offline (as the task sets it)


def leff_ratios(rounds: int, log) -> dict:
    from paperline.config import load_method_config, read_params
    from paperline.methods.leff.config import LEFFConfig
    from paperline.methods.leff.fed import run_federated
    from paperline.methods.leff.summary import _table, headline, row
    from paperline.train.lm_base import load_causal_lm

    _, cfg = load_method_config(LEFFConfig, read_params(ROOT / "params"), "leff", "smoke",
                                ["methods=[fedavg, leff_importance]", f"rounds={rounds}", "seeds=[0]"], root=ROOT)
    cfg = cfg.model_copy(update={"alphas": cfg.alphas[:1]})  # the ratios at the profile's first α
    import logging

    logging.getLogger("flwr").setLevel(logging.WARNING)  # the simulation's per-round INFO lines
    runs = run_federated(cfg, load_causal_lm(cfg.model), log=lambda _: None)
    alpha = cfg.alphas[0]
    rows = {m: row(runs[(m, alpha, 0)]) for m in cfg.methods}
    head = headline(cfg, _table(cfg, runs), runs)  # one seed: the ratios of that run
    log(f"LEFF vs FedAvg full fine-tuning: smoke profile, {cfg.clients} clients, L_i in {cfg.capacities}, "
        f"{rounds} rounds, {cfg.local_steps} local steps, alpha {alpha:g}")
    log(f"{'method':18s} {'GFLOPs/client':>14s} {'straggler GFLOPs':>17s} {'client s':>9s} {'straggler s':>12s} "
        f"{'trained params':>15s} {'test loss':>10s}")
    for m, r in rows.items():
        log(f"{m:18s} {r['client_gflops']:14.3f} {r['max_client_gflops']:17.3f} {r['client_s']:9.3f} "
            f"{r['straggler_s']:12.3f} {r['trained_params']:15.0f} {r['test_loss']:10.4f}")
    ratios = {"flops": head["leff_flops_ratio_vs_fedavg"], "straggler_flops": head["leff_straggler_flops_ratio_vs_fedavg"],
              "client_wall": rows["leff_importance"]["client_s"] / rows["fedavg"]["client_s"],
              "straggler_wall": head["leff_straggler_time_ratio_vs_fedavg"],
              "trained_params": head["leff_trained_params_ratio_vs_fedavg"]}
    log("ratio leff_importance / fedavg: " + ", ".join(f"{k} {v:.3f}" for k, v in ratios.items()))
    return ratios


def pubsub_ratios(seeds: list[int], workers: tuple[int, int], batch: int, epochs: int, baselines: list[str], log) -> dict:
    from paperline.methods.pubsub_vfl.config import PubSubVFLConfig
    from paperline.methods.pubsub_vfl.data import load
    from paperline.methods.pubsub_vfl.train import run_variant

    # the smoke profile's data with stop 42's small bottom model and its sleep-based heterogeneity (a passive
    # party twice as slow): the waiting ratio this benchmark reports needs a slow party; the smoke profile
    # itself (params/pubsub_vfl.yaml) trains deeper models for real since stop 43, with no sleep
    cfg = PubSubVFLConfig(data={"name": "synthetic", "n_samples": 3000, "n_features": 40, "passive_fraction": 0.6},
                          epochs=epochs, lr=0.2, delay_per_sample_ms=0.1, passive_slowdown=2.0,
                          channels={"deadline_s": 1.0})
    data = load(cfg.data)
    variants = [*baselines, "pubsub_vfl"]
    rows: dict[str, list] = {v: [] for v in variants}
    for seed in seeds:
        for variant in variants:
            w = (1, 1) if variant == "vfl" else workers
            rows[variant].append(run_variant(cfg, data, variant, seed, workers=w, batch_size=batch))

    def per_worker(r) -> list[dict]:
        return [s for party in r.worker_stats.values() for s in party.values()]

    def wait_s(r) -> float:  # mean over the run's workers of the seconds each waited
        return statistics.mean(s["wait_s"] for s in per_worker(r))

    def idle(r) -> float:  # mean over the run's workers of waiting / wall
        return statistics.mean(s["wait_s"] / s["wall_s"] for s in per_worker(r))

    log(f"PubSub-VFL vs synchronous VFL: smoke data, {epochs} epochs, B {batch}, PS variants w = {workers}, "
        f"seeds {seeds}")
    log(f"{'variant':12s} {'wait s/worker':>16s} {'idle fraction':>16s} {'wall s':>14s} {'AUC':>16s}")
    for variant, runs in rows.items():
        cols = [[f(r) for r in runs] for f in (wait_s, idle, lambda r: r.wall_s, lambda r: r.metric)]
        log(f"{variant:12s} " + " ".join(f"{statistics.mean(c):8.3f} ± {statistics.pstdev(c):.3f}" for c in cols))
    ratios = {}
    for base in baselines:
        for name, f in (("wait_s", wait_s), ("idle", idle)):
            per_seed = [f(p) / f(b) for p, b in zip(rows["pubsub_vfl"], rows[base])]
            ratios[f"{name}_vs_{base}"] = statistics.mean(per_seed)
            log(f"ratio pubsub_vfl / {base}, {name} per worker: {statistics.mean(per_seed):.3f} "
                f"(per seed {', '.join(f'{x:.3f}' for x in per_seed)})")
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="LEFF: federated rounds of each method")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="PubSub-VFL")
    parser.add_argument("--workers", type=int, nargs=2, default=[1, 3], metavar=("W_A", "W_P"))
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--baselines", nargs="+", default=["vfl"], choices=["vfl", "vfl_ps", "avfl", "avfl_ps"])
    parser.add_argument("--skip", choices=["leff", "pubsub_vfl"], default=None)
    args = parser.parse_args()
    started = time.perf_counter()
    if args.skip != "leff":
        t = time.perf_counter()
        leff_ratios(args.rounds, print)
        print(f"(LEFF part {time.perf_counter() - t:.1f} s)\n")
    if args.skip != "pubsub_vfl":
        t = time.perf_counter()
        pubsub_ratios(args.seeds, tuple(args.workers), args.batch, args.epochs, args.baselines, print)
        print(f"(PubSub-VFL part {time.perf_counter() - t:.1f} s)")
    print(f"total {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
