"""Step time of each optimizer against AdamW, measured in one process on the same model and batches.

Round-robin: each round runs `steps` training steps (forward, backward, optimizer.step) with every
optimizer in turn, so drift in machine load (a shared machine) hits all of them alike; the median
over rounds is reported. The first round is a warm-up and not counted. Make rounds × steps a
multiple of the subspace-update period, so GaLore's and SUMO's SVDs are counted at their rate. Used by the flow and by
benchmarks/sumo_step_time.py."""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import torch
import torch.nn.functional as F

from paperline.optim.hybrid import state_bytes


def classification_loss(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    return F.cross_entropy(model(x), y)


def _synchronize(model: torch.nn.Module) -> None:
    device = next(model.parameters()).device
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_step_times(builders: dict[str, Callable[[], tuple[torch.nn.Module, torch.optim.Optimizer]]],
                       batches: list[Any], rounds: int, steps: int, baseline: str = "adamw",
                       loss_fn: Callable[[torch.nn.Module, Any], torch.Tensor] = classification_loss,
                       ) -> dict[str, dict[str, float]]:
    """{name: {"step_ms", "optimizer_ms", "state_bytes", "step_time_vs_<baseline>",
    "state_bytes_vs_<baseline>"}}. `builders` make a fresh (model, optimizer) each; `batches` are
    cycled, each step's loss is loss_fn(model, batch)."""
    runs = {name: build() for name, build in builders.items()}
    step_ms: dict[str, list[float]] = {name: [] for name in runs}
    opt_ms: dict[str, list[float]] = {name: [] for name in runs}
    for round_index in range(rounds + 1):
        for name, (model, optimizer) in runs.items():
            total = opt_total = 0.0
            for i in range(steps):
                batch = batches[(round_index * steps + i) % len(batches)]
                _synchronize(model)
                started = time.perf_counter()
                optimizer.zero_grad(set_to_none=True)
                loss_fn(model, batch).backward()
                _synchronize(model)
                mid = time.perf_counter()
                optimizer.step()
                _synchronize(model)
                ended = time.perf_counter()
                total += ended - started
                opt_total += ended - mid
            if round_index > 0:  # round 0: warm-up (first SVDs, allocations)
                step_ms[name].append(1000 * total / steps)
                opt_ms[name].append(1000 * opt_total / steps)
    out = {name: {"step_ms": statistics.median(step_ms[name]), "optimizer_ms": statistics.median(opt_ms[name]),
                  "state_bytes": state_bytes(optimizer)} for name, (_, optimizer) in runs.items()}
    if baseline in out:
        base = out[baseline]
        for row in out.values():
            row[f"step_time_vs_{baseline}"] = row["step_ms"] / base["step_ms"]
            row[f"optimizer_time_vs_{baseline}"] = row["optimizer_ms"] / base["optimizer_ms"]
            row[f"state_bytes_vs_{baseline}"] = row["state_bytes"] / base["state_bytes"]
    return out
