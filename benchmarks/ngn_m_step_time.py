"""Step time of NGN, NGN-M and NGN-MD against SGD, SGDM and Adam, measured in this one process
(round-robin over the optimizers, median over rounds), forward + backward + step each.

    python benchmarks/ngn_m_step_time.py                  # a 512-wide 3-hidden-layer MLP, CPU
    python benchmarks/ngn_m_step_time.py --width 2048 --device cuda

The NGN family's step needs the minibatch loss and the global gradient norm as numbers on the
host (one device sync per step); torch's SGD and Adam do not. Ratios > 1 mean slower than the
baseline named in the column. On a shared CPU the absolute times are noisy; read the ratios.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere in the checkout

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from paperline.methods.ngn_m.optimizers import TITLES, make_optimizer  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--in-features", type=int, default=256)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40, help="steps per optimizer per round")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    g = torch.Generator().manual_seed(0)
    X = torch.randn(args.batch, args.in_features, generator=g).to(device)
    y = torch.randint(0, 10, (args.batch,), generator=g).to(device)

    def model():
        torch.manual_seed(0)
        sizes = [args.in_features] + [args.width] * args.layers
        layers = [m for a, b in zip(sizes, sizes[1:]) for m in (nn.Linear(a, b), nn.ReLU())]
        return nn.Sequential(*layers, nn.Linear(args.width, 10)).to(device)

    runs = {}
    for name in TITLES:
        net = model()
        opt = make_optimizer(name, net.parameters(), 1e-2)

        def closure(net=net, opt=opt):
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(net(X), y)
            loss.backward()
            return loss

        runs[name] = (opt, closure)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    times = {name: [] for name in runs}
    for round_ in range(args.rounds + 1):  # round 0 warms up
        for name, (opt, closure) in runs.items():
            sync()
            start = time.perf_counter()
            for _ in range(args.steps):
                opt.step(closure)
            sync()
            if round_:
                times[name].append((time.perf_counter() - start) / args.steps)
    median = {name: statistics.median(t) for name, t in times.items()}
    print(f"MLP {args.in_features}→{args.width}×{args.layers}→10, batch {args.batch}, {device}, "
          f"{args.threads} thread(s), {args.rounds}×{args.steps} steps each")
    print(f"{'optimizer':10s} {'ms/step':>8s} {'/ SGDM':>7s} {'/ Adam':>7s}")
    for name, t in median.items():
        print(f"{TITLES[name]:10s} {t * 1e3:8.3f} {t / median['sgdm']:7.2f} {t / median['adam']:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
