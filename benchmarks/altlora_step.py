"""Step time and optimizer-state memory of AltLoRA, AltLoRA+, ScaledGD, the LoRA-Pro-like step,
LoRA with SGD-momentum and full fine-tuning against LoRA-AdamW, measured in this one process
(round-robin, median over rounds: paperline.methods.altlora.timing).

    python benchmarks/altlora_step.py                              # 4 layers 1024×1024, r = 8
    python benchmarks/altlora_step.py --dim 4096 --rank 8 --device cuda

A stack of square linear layers (tanh between), peft's LoRA of rank r on each; synthetic batches
(timing does not depend on the data). AltLoRA's alternation freezes one factor per step, so its
backward runs through one factor only, as in the repo's trainer. State floats are counted from the
allocated optimizer states; ratios < 1 mean less than LoRA-AdamW. On a shared CPU the absolute
times are noisy; the ratios, measured side by side, are what to read.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere in the checkout

import torch  # noqa: E402

from paperline.methods.altlora.config import BASELINE, OptimizerSettings  # noqa: E402
from paperline.methods.altlora.timing import step_times  # noqa: E402

NAMES = ["lora_adamw", "lora_sgdm", "scaledgd", "altlora", "altlora_plus", "lora_pro", "full_ft"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10, help="steps per optimizer per round")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    if args.rank > args.dim:
        parser.error(f"--rank {args.rank} is larger than --dim {args.dim}")
    torch.set_num_threads(args.threads)
    times = step_times(NAMES, args.dim, args.layers, args.rank, OptimizerSettings(), args.rounds, args.steps,
                       torch.device(args.device), batch=args.batch)
    print(f"{args.layers} layers {args.dim}×{args.dim}, LoRA r = {args.rank}, batch {args.batch}, "
          f"{args.threads} thread(s), {args.device}; median of {args.rounds} rounds × {args.steps} steps")
    print(f"{'optimizer':14s} {'step ms':>9s} {'vs ' + BASELINE:>15s} {'opt.step ms':>12s} "
          f"{'state floats':>13s} {'vs ' + BASELINE:>15s}")
    for name, row in times.items():
        print(f"{name:14s} {row['step_ms']:9.3f} {row[f'step_time_vs_{BASELINE}']:15.2f} {row['optimizer_ms']:12.3f} "
              f"{row['state_floats']:13d} {row[f'state_floats_vs_{BASELINE}']:15.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
