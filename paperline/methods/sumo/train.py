"""Train the digits MLP with one optimizer at one learning rate and one seed.

Minibatches of cfg.batch_size drawn from per-epoch permutations; every cfg.log_every steps (and at
the end) the full training-set loss and the test loss/accuracy are recorded, so curves of different
optimizers compare at equal steps. A checkpoint (model, optimizer state, history) every
cfg.checkpoint_every steps and at the end: a killed run resumes where it stopped, a finished one is
read back, not retrained. Seeds for the initialization, the batch order and SUMO's randomized SVD
all derive from (cfg.seed, seed index), none from the global RNG (runs share a process in threads).
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from paperline.methods.sumo.config import DIGITS_FEATURES, OptimizerName, SumoConfig
from paperline.methods.sumo.data import DigitsSplit
from paperline.methods.sumo.mlp import MatrixMLP
from paperline.methods.sumo.optimizers import build_optimizer, state_formula
from paperline.optim.hybrid import state_bytes, state_numel
from paperline.train.checkpoint import Resumable

CLASSES = 10


def run_seed(cfg: SumoConfig, seed_index: int) -> int:
    return int(np.random.SeedSequence([cfg.seed, seed_index]).generate_state(1)[0] % 2**31)


def make_model(cfg: SumoConfig, seed: int, device: torch.device) -> MatrixMLP:
    model = MatrixMLP(DIGITS_FEATURES, cfg.hidden_sizes, CLASSES).reset_parameters(torch.Generator().manual_seed(seed))
    return model.to(device)


def lr_factor(cfg: SumoConfig, step: int) -> float:
    """Multiplier of every group's lr at `step` (GaLore's warm-up + cosine, or constant)."""
    if cfg.lr_schedule == "constant":
        return 1.0
    warmup = int(cfg.warmup_fraction * cfg.steps)
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, cfg.steps - warmup)
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def loop_schedule(cfg: SumoConfig, steps: int, lr: float) -> dict[str, Any]:
    """The same schedule as the shared LM loop's settings (`paperline.train.lm.LMTrainSettings`
    min_lr and warmup_steps): what the C4 and the text-LM tasks hand it."""
    cosine = cfg.lr_schedule == "cosine"
    return {"min_lr": cfg.min_lr_ratio * lr if cosine else lr,
            "warmup_steps": int(cfg.warmup_fraction * steps) if cosine else 0}


def batch_indices(n: int, batch_size: int, seed: int, step: int) -> torch.Tensor:
    """The minibatch of `step`: a slice of the permutation of its epoch (stateless, so a resumed run
    sees the same batches)."""
    per_epoch = max(1, n // batch_size)
    epoch, within = divmod(step, per_epoch)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 100003 + epoch))
    return perm[within * batch_size:(within + 1) * batch_size]


@torch.no_grad()
def evaluate(model: MatrixMLP, data: DigitsSplit) -> dict[str, float]:
    train_loss = F.cross_entropy(model(data.x_train), data.y_train).item()
    logits = model(data.x_test)
    return {"train_loss": train_loss, "test_loss": F.cross_entropy(logits, data.y_test).item(),
            "test_accuracy": (logits.argmax(1) == data.y_test).float().mean().item()}


def run_fingerprint(cfg: SumoConfig, optimizer: str, lr: float, seed_index: int) -> dict:
    """What a checkpoint must match to be resumed (the theory, timing and grid fields do not count)."""
    keep = ("seed", "steps", "batch_size", "hidden_sizes", "test_fraction", "split_seed", "rank",
            "update_period", "alpha", "sumo_momentum", "muon_momentum", "limiter", "weight_decay",
            "adamw_part_lr", "lr_schedule", "warmup_fraction", "min_lr_ratio", "log_every")
    return {**cfg.model_dump(include=set(keep)), "optimizer": optimizer, "lr": lr, "seed_index": seed_index}


def train_one(cfg: SumoConfig, data: DigitsSplit, optimizer_name: str, lr: float, seed_index: int,
              device: torch.device, checkpoint_path: Path | None = None, progress: bool = False,
              stop_after: int | None = None) -> dict:
    """History and final metrics of one run. `stop_after` ends the run early without finishing it
    (tests use it to simulate a kill between checkpoints)."""
    seed = run_seed(cfg, seed_index)
    fingerprint = run_fingerprint(cfg, optimizer_name, lr, seed_index)
    model = make_model(cfg, seed, device)
    optimizer = build_optimizer(optimizer_name, model, lr, cfg, seed=seed)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(cfg, s))
    run = Resumable(checkpoint_path, fingerprint, cfg.checkpoint_every, model=model, optimizer=optimizer,
                    scheduler=scheduler)
    record = run.resume() or {"step": 0, "history": {"step": [], "train_loss": [], "test_loss": [], "test_accuracy": []},
                              "step_seconds": 0.0, "result": None}
    if record["result"] is not None:  # finished: read back
        return record["result"]
    step, history, step_seconds, diverged = record["step"], record["history"], record["step_seconds"], False

    def log(metrics: dict[str, float]) -> None:
        history["step"].append(step)
        for k, v in metrics.items():
            history[k].append(v)

    def checkpoint(result: dict | None = None) -> None:
        run.save({"step": step, "history": history, "step_seconds": step_seconds, "result": result})

    n = len(data.y_train)
    bar = tqdm(total=cfg.steps, initial=step, disable=not progress, leave=False,
               desc=f"{optimizer_name} lr={lr:g} seed={seed_index}")
    while step < cfg.steps:
        if step % cfg.log_every == 0 and (not history["step"] or history["step"][-1] != step):
            log(evaluate(model, data))
            if not np.isfinite(history["train_loss"][-1]):
                diverged = True
                break
        idx = batch_indices(n, cfg.batch_size, seed, step).to(device)
        started = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(data.x_train[idx]), data.y_train[idx])
        loss.backward()
        optimizer.step()
        step_seconds += time.perf_counter() - started
        scheduler.step()
        step += 1
        bar.update(1)
        if stop_after is not None and step >= stop_after:
            checkpoint()
            bar.close()
            return {}
        if run.due(step, cfg.steps):
            checkpoint()
    bar.close()
    final = evaluate(model, data)
    diverged = diverged or not np.isfinite(final["train_loss"])
    if not diverged and history["step"][-1] != step:
        log(final)
    limiter_hits = sum(s.get("limiter_hits", 0) for s in optimizer.state.values())
    sumo_matrices = len(model.matrix_parameters()) if optimizer_name.startswith("sumo") else 0
    result = {
        "optimizer": optimizer_name, "lr": lr, "seed_index": seed_index, "steps": step,
        "diverged": bool(diverged), "history": history,
        "final_train_loss": final["train_loss"] if not diverged else None,
        "final_test_loss": final["test_loss"] if not diverged else None,
        "final_test_accuracy": final["test_accuracy"] if not diverged else None,
        # the trivial baseline: the initial model (logged at step 0), scored as the trained one
        "initial_test_loss": history["test_loss"][0] if history["step"] and history["step"][0] == 0 else None,
        # the area under the logged training-loss curve per step: lower = faster descent
        "mean_train_loss": float(np.mean(history["train_loss"])) if not diverged else None,
        "state_floats": state_numel(optimizer),
        "state_bytes": state_bytes(optimizer),
        "state_floats_formula": state_formula(optimizer_name, model, cfg.rank),
        "step_ms": 1000 * step_seconds / max(step, 1),
        "limiter_fraction": limiter_hits / (step * sumo_matrices) if sumo_matrices and step else None,
    }
    checkpoint(result)
    return result


def digits_step_times(cfg: SumoConfig, data: DigitsSplit, device: torch.device) -> dict[str, dict[str, float]]:
    """Step time and state bytes of every optimizer of cfg on the digits MLP, round-robin in one
    process (timing.measure_step_times), each at the smallest lr of its grid (time does not depend
    on the lr; the smallest keeps every optimizer finite)."""
    from paperline.methods.sumo.timing import measure_step_times

    seed = run_seed(cfg, 0)

    def builder(name: OptimizerName):
        def build():
            model = make_model(cfg, seed, device)
            return model, build_optimizer(name, model, min(cfg.lr_grid[name]), cfg, seed=seed)
        return build

    n = len(data.y_train)
    batches = [(data.x_train[idx], data.y_train[idx]) for idx in
               (batch_indices(n, cfg.batch_size, seed, s).to(device) for s in range(max(1, n // cfg.batch_size)))]
    return measure_step_times({name: builder(name) for name in cfg.optimizers}, batches,
                              cfg.timing_rounds, cfg.timing_steps)
