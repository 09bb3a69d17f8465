"""Step time and optimizer-state memory of SUMO, GaLore-AdamW and Muon against AdamW, measured in
this one process (round-robin, median over rounds: paperline.methods.sumo.timing).

    python benchmarks/sumo_step_time.py                       # a 512-wide, 3-matrix MLP, rank 64
    python benchmarks/sumo_step_time.py --width 1024 --rank 128 --device cuda

A synthetic classification batch (timing does not depend on the data). The matrices are the
hidden layers (width × width, the first width × in_features); biases and the head take AdamW, as in
the experiments. Ratios < 1 mean less than AdamW. The measured steps (rounds × steps, after a
warm-up round) should be a multiple of T=K, so GaLore's and SUMO's subspace updates are counted at
their rate (the defaults: 5 × 40 = 200). On a shared CPU the absolute times are noisy;
the ratios, measured side by side, are what to read.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere in the checkout

import torch  # noqa: E402

from paperline.methods.sumo.mlp import MLP, init_mlp  # noqa: E402
from paperline.methods.sumo.optimizers import LABELS  # noqa: E402
from paperline.methods.sumo.timing import measure_step_times  # noqa: E402
from paperline.optim.galore import GaLoreAdamW  # noqa: E402
from paperline.optim.muon import Muon  # noqa: E402
from paperline.optim.sumo import SUMO  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--in-features", type=int, default=256)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--layers", type=int, default=3, help="hidden layers (matrices the methods take)")
    parser.add_argument("--rank", type=int, default=64)
    parser.add_argument("--update-period", type=int, default=200, help="GaLore's T, SUMO's K (GaLore protocol: 200)")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40, help="steps per optimizer per round")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    if args.rank > min(args.in_features, args.width):
        parser.error(f"--rank {args.rank} is larger than the smallest matrix side {min(args.in_features, args.width)}")
    if (args.rounds * args.steps) % args.update_period:
        print(f"warning: the {args.rounds}×{args.steps} measured steps are not a multiple of T=K={args.update_period}: "
              "the subspace updates (SVDs) are not counted at their rate", file=sys.stderr)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    classes = 10

    def builder(name: str):
        def build():
            model = init_mlp(MLP(args.in_features, [args.width] * args.layers, classes),
                             torch.Generator().manual_seed(0)).to(device)
            groups = [{"params": model.matrix_parameters()},
                      {"params": model.other_parameters(), "adamw": True, "lr": 1e-3}]
            low_rank = dict(rank=args.rank, update_period=args.update_period, alpha=0.25)
            optimizer = {
                "adamw": lambda: torch.optim.AdamW(model.parameters(), lr=1e-3),
                "galore_adamw": lambda: GaLoreAdamW(groups, lr=1e-2, **low_rank),
                "muon": lambda: Muon(groups, lr=0.02),
                "sumo": lambda: SUMO(groups, lr=1e-2, **low_rank),
                "sumo_ns": lambda: SUMO(groups, lr=1e-2, orthogonalization="newton_schulz", **low_rank),
            }[name]()
            return model, optimizer
        return build

    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randn(args.batch, args.in_features, generator=gen).to(device),
                torch.randint(0, classes, (args.batch,), generator=gen).to(device)) for _ in range(4)]
    times = measure_step_times({name: builder(name) for name in LABELS}, batches, args.rounds, args.steps)
    print(f"MLP {args.in_features}→{'→'.join([str(args.width)] * args.layers)}→{classes}, batch {args.batch}, "
          f"rank {args.rank}, T=K={args.update_period}, {args.threads} thread(s), {device}; "
          f"median of {args.rounds} rounds × {args.steps} steps")
    print(f"{'optimizer':16s} {'step ms':>9s} {'vs AdamW':>9s} {'opt.step ms':>12s} {'vs AdamW':>9s} "
          f"{'state MiB':>10s} {'vs AdamW':>9s}")
    for name, row in times.items():
        print(f"{LABELS[name]:16s} {row['step_ms']:9.3f} {row['step_time_vs_adamw']:9.2f} {row['optimizer_ms']:12.3f} "
              f"{row['optimizer_time_vs_adamw']:9.2f} {row['state_bytes'] / 2**20:10.3f} {row['state_bytes_vs_adamw']:9.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
