"""PubSub-VFL's waiting time as a ratio against its synchronous baseline, in one run, printed:
both variants over the same zmq channels, the same data, planner-free (the same workers and
batch size for both), alternating seeds so a slow spell of the machine hits both alike.

    .venv/bin/python benchmarks/pubsub_vfl_waiting.py                    # smoke data, 3 seeds
    .venv/bin/python benchmarks/pubsub_vfl_waiting.py --seeds 0 1 --workers 2 2 --batch 64
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from paperline.methods.pubsub_vfl.config import PubSubVFLConfig  # noqa: E402
from paperline.methods.pubsub_vfl.data import load  # noqa: E402
from paperline.methods.pubsub_vfl.train import run_variant  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--workers", type=int, nargs=2, default=[1, 3], metavar=("W_A", "W_P"))
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=8)
    args = parser.parse_args()
    cfg = PubSubVFLConfig(data={"name": "synthetic", "n_samples": 3000, "n_features": 40}, epochs=args.epochs,
                          lr=0.2, delay_per_sample_ms=0.1, passive_slowdown=2.0, channels={"deadline_s": 1.0})
    data = load(cfg.data)
    rows = {"vfl": [], "vfl_ps": [], "pubsub_vfl": []}
    for seed in args.seeds:
        for variant in rows:
            workers = (1, 1) if variant == "vfl" else tuple(args.workers)
            rows[variant].append(run_variant(cfg, data, variant, seed, workers=workers, batch_size=args.batch))

    def idle(r):
        return (r.idle_fraction["active"] + r.idle_fraction["passive"]) / 2

    print(f"{'variant':12s} {'idle fraction':>20s} {'wall s':>16s} {'AUC':>14s}")
    for variant, runs in rows.items():
        i, w, m = [idle(r) for r in runs], [r.wall_s for r in runs], [r.metric for r in runs]
        print(f"{variant:12s} {statistics.mean(i):10.3f} ± {statistics.pstdev(i):.3f} "
              f"{statistics.mean(w):8.2f} ± {statistics.pstdev(w):.2f} {statistics.mean(m):8.4f} ± {statistics.pstdev(m):.4f}")
    for base in ("vfl", "vfl_ps"):
        ratios = [idle(p) / idle(b) for p, b in zip(rows["pubsub_vfl"], rows[base])]
        print(f"waiting ratio pubsub_vfl / {base}: {statistics.mean(ratios):.3f} "
              f"(per seed {', '.join(f'{r:.3f}' for r in ratios)})")


if __name__ == "__main__":
    main()
