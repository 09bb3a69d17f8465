"""How many optimizer steps a SplashNet variant needs before its greedy CER leaves 100%, on the
prepared smoke data (`python -m tasks.semg_prep sessions && python -m tasks.semg_prep normalize`).

    python benchmarks/splashnet_learning_curve.py --users 1 --steps 1500 --no-augment
    python benchmarks/splashnet_learning_curve.py --variant rtn --steps 1500 --no-augment --set rtn_warmup_frames=25

One model, a plain torch loop (the flow's Lightning module has the same loss, optimizer and
schedule: Adam, linear warm-up then cosine), batch `--batch-size`; every `--eval-every` steps the
mean training CTC loss, the greedy CER on the first training sessions and on each held-out
user. It answers what the smoke budget (80 steps) cannot: where the all-blank phase ends.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere in the checkout

import torch  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from paperline.config import load_method_config, read_params  # noqa: E402
from paperline.data.emg2qwerty import BLANK  # noqa: E402
from paperline.methods.splashnet.config import SplashNetConfig  # noqa: E402
from paperline.methods.splashnet.data import ACM_AUGMENT, BASELINE_AUGMENT, WindowDataset, collate  # noqa: E402
from paperline.methods.splashnet.lightning_module import session_cer, warmup_cosine  # noqa: E402
from paperline.methods.splashnet.config import VARIANT_CHANGES  # noqa: E402
from paperline.methods.splashnet.modules import TDSConvCTC  # noqa: E402
from paperline.methods.splashnet.pipeline import model_spec, window_frames  # noqa: E402
from tasks.paths import params_path, repo_path  # noqa: E402
from tasks.splashnet import _load_split  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", default="baseline", choices=list(VARIANT_CHANGES))
    parser.add_argument("--profile", default="smoke")
    parser.add_argument("--users", type=int, default=None, help="train on the first N training users only")
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--eval-every", type=int, default=250)
    parser.add_argument("--no-augment", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    _, cfg = load_method_config(SplashNetConfig, read_params(params_path()), "splashnet", args.profile,
                                args.overrides)
    spec = model_spec(cfg, args.variant)
    train, _, test, _ = _load_split(cfg, repo_path("data", "splashnet", "features"), spec.six_bands)
    if args.users:
        users = sorted({s.user for s in train})[:args.users]
        train = [s for s in train if s.user in users]
    frames, left, right = window_frames(cfg, args.variant)
    augment = None if args.no_augment else (ACM_AUGMENT if VARIANT_CHANGES[args.variant].get("acm")
                                            else BASELINE_AUGMENT)
    torch.manual_seed(cfg.seed)
    dataset = WindowDataset(train, frames, left, right, augment, cfg.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, collate_fn=collate, drop_last=True,
                        generator=torch.Generator().manual_seed(cfg.seed))
    model = TDSConvCTC(spec)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    warmup = min(cfg.warmup_epochs * len(loader), args.steps // 2)  # as the flow: warmup_epochs, at most half
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: warmup_cosine(s, warmup, args.steps, 1.0))
    ctc = torch.nn.CTCLoss(blank=BLANK, zero_infinity=True)
    print(f"{args.variant}: {len(dataset)} training windows of {len({s.user for s in train})} users, "
          f"{sum(p.numel() for p in model.parameters()):,} parameters")
    step, epoch, losses, started = 0, 0, [], time.perf_counter()
    cpu = torch.device("cpu")
    while step < args.steps:
        dataset.set_epoch(epoch)
        epoch += 1
        for batch in loader:
            model.train()
            emissions = model(batch["inputs"])
            loss = ctc(emissions, batch["targets"], model.emission_lengths(batch["input_lengths"]),
                       batch["target_lengths"])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
            step += 1
            losses.append(float(loss.detach()))
            if step % args.eval_every == 0 or step == args.steps:
                train_cer = session_cer(model, train[:3], cpu)["cer"]
                held_out = {u: round(session_cer(model, s, cpu)["cer"], 1) for u, s in sorted(test.items())}
                recent = losses[-args.eval_every:]
                print(f"step {step:5d}  train loss {sum(recent) / len(recent):.3f}  train CER {train_cer:5.1f}  "
                      f"held-out CER {held_out}  {time.perf_counter() - started:.0f} s", flush=True)
            if step >= args.steps:
                break


if __name__ == "__main__":
    main()
