"""How many optimizer steps a SplashNet variant needs before its greedy CER leaves 100%, on the
prepared smoke data (`python -m flows run semg-sessions && python -m flows run semg-normalize`).

    python benchmarks/splashnet_learning_curve.py --variant baseline --steps 500
    python benchmarks/splashnet_learning_curve.py --variant rtn --steps 500 --no-augment --users 1

One model trained as the flow trains it: the flow's CTCModule (loss, Adam, warm-up + cosine
schedule over `schedule_horizon`, `ctc_blank_bias`) fitted by a Lightning Trainer, on the same windows and augmentation
(`pipeline.augmentation`), with the profile's batch size and lr unless `--set` overrides them.
Every `--eval-every` steps a callback prints the mean training CTC loss, the greedy CER on the
first three training sessions and on each held-out user's test sessions. It answers what the smoke
budget (`max_steps`) cannot: where a variant's all-blank phase ends.
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere in the checkout

import torch  # noqa: E402

from paperline.config import load_method_config, read_params  # noqa: E402
from paperline.methods.splashnet.config import VARIANT_CHANGES, SplashNetConfig  # noqa: E402
from paperline.methods.splashnet.data import WindowDataset, collate  # noqa: E402
from paperline.methods.splashnet.lightning_module import CTCModule, session_cer  # noqa: E402
from paperline.methods.splashnet.pipeline import (  # noqa: E402
    _steps,
    augmentation,
    load_split,
    model_spec,
    schedule_horizon,
    window_frames,
)
from tasks.paths import params_path, repo_path  # noqa: E402


def main() -> None:
    import lightning as L

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", default="baseline", choices=list(VARIANT_CHANGES))
    parser.add_argument("--profile", default="smoke")
    parser.add_argument("--users", type=int, default=None, help="train on the first N training users only")
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--no-augment", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="params override, e.g. lr=3e-3 or ctc_blank_bias=0")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    _, cfg = load_method_config(SplashNetConfig, read_params(params_path()), "splashnet", args.profile,
                                args.overrides)
    spec = model_spec(cfg, args.variant)
    train, _, test, _ = load_split(cfg, repo_path("data", "splashnet", "features"), spec.six_bands)
    if args.users:
        users = sorted({s.user for s in train})[:args.users]
        train = [s for s in train if s.user in users]
    frames, left, right = window_frames(cfg, args.variant)
    torch.manual_seed(cfg.seed)
    dataset = WindowDataset(train, frames, left, right, None if args.no_augment else augmentation(cfg, args.variant),
                            cfg.seed)
    total, warmup = _steps(cfg, dataset, cfg.epochs, args.steps)  # the flow's step and warm-up rule
    module = CTCModule(spec, cfg.lr, warmup, schedule_horizon(cfg, total), cfg.ctc_blank_bias)
    loader = torch.utils.data.DataLoader(dataset, batch_size=cfg.batch_size, shuffle=True, collate_fn=collate,
                                         drop_last=True, generator=torch.Generator().manual_seed(cfg.seed))
    print(f"{args.variant}: {len(dataset)} training windows of {len({s.user for s in train})} users, "
          f"{sum(p.numel() for p in module.parameters()):,} parameters, batch {cfg.batch_size}, lr {cfg.lr}, "
          f"{total} steps", flush=True)
    cpu = torch.device("cpu")
    started = time.perf_counter()

    class Report(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            step = trainer.global_step
            if step % args.eval_every and step != total:
                return
            train_cer = session_cer(pl_module.model, train[:3], cpu)["cer"]
            held_out = {u: round(session_cer(pl_module.model, s, cpu)["cer"], 1) for u, s in sorted(test.items())}
            pl_module.train()
            recent = [loss for _, loss in pl_module.history[-args.eval_every:]]
            print(f"step {step:5d}  train loss {sum(recent) / len(recent):.3f}  train CER {train_cer:5.1f}  "
                  f"held-out CER {held_out}  {time.perf_counter() - started:.0f} s", flush=True)

    trainer = L.Trainer(max_steps=total, max_epochs=-1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False, accelerator="cpu", devices=1,
                        callbacks=[Report()], num_sanity_val_steps=0)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*does not have many workers.*")
        trainer.fit(module, loader)


if __name__ == "__main__":
    main()
