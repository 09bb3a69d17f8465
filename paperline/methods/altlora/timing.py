"""Step time and optimizer-state memory of every optimizer against LoRA-AdamW, in one process on the
same model and batches (the flow's step-time task and benchmarks/altlora_step.py).

The model is a stack of `layers` square linear layers of width `dim` (tanh between them), LoRA of
rank r on each (full fine-tuning trains the weights). Round-robin: each round runs `steps` steps
(forward, backward, optimizer.step) of every optimizer in turn, so load drift on a shared machine
hits them alike; the median over rounds is reported, the first round is a warm-up. AltLoRA's
backward runs through one factor (its alternation freezes the other), as in the repo's trainer."""
from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from paperline.methods.altlora.adapters import add_lora, make_optimizer
from paperline.methods.altlora.config import BASELINE, OptimizerName, OptimizerSettings
from paperline.optim.altlora import count_state_floats
from paperline.seeds import seeded_init


class Stack(nn.Module):
    def __init__(self, dim: int, layers: int):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(dim, dim, bias=False) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


def build(name: OptimizerName, dim: int, layers: int, rank: int, settings: OptimizerSettings, device,
          seed: int = 0) -> tuple[nn.Module, torch.optim.Optimizer]:
    with seeded_init(seed):  # the stack's weights and peft's A from the global RNG
        model: nn.Module = Stack(dim, layers)
        if name != "full_ft":
            for p in model.parameters():
                p.requires_grad_(False)
            model = add_lora(model, [str(i) for i in range(layers)], rank, 2.0 * rank, 0.0, where="timing")
    model.to(device)
    return model, make_optimizer(name, model, 1e-4, settings)


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def step_times(names: list[OptimizerName], dim: int, layers: int, rank: int, settings: OptimizerSettings,
               rounds: int, steps: int, device="cpu", batch: int = 64) -> dict[str, dict[str, float]]:
    """{name: {step_ms, optimizer_ms, state_floats, state_bytes, step_time_vs_lora_adamw,
    state_floats_vs_lora_adamw}}."""
    runs = {name: build(name, dim, layers, rank, settings, device) for name in names}
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(batch, dim, generator=g).to(device), torch.randn(batch, dim, generator=g).to(device))
               for _ in range(4)]
    step_ms: dict[str, list[float]] = {n: [] for n in runs}
    opt_ms: dict[str, list[float]] = {n: [] for n in runs}
    for round_index in range(rounds + 1):
        for name, (model, optimizer) in runs.items():
            total = opt_total = 0.0
            for i in range(steps):
                x, y = batches[i % len(batches)]
                _sync(device)
                started = time.perf_counter()
                optimizer.zero_grad(set_to_none=True)
                F.mse_loss(model(x), y).backward()
                _sync(device)
                mid = time.perf_counter()
                optimizer.step()
                _sync(device)
                ended = time.perf_counter()
                total, opt_total = total + ended - started, opt_total + ended - mid
            if round_index > 0:
                step_ms[name].append(1000 * total / steps)
                opt_ms[name].append(1000 * opt_total / steps)
    out: dict[str, dict[str, float]] = {}
    for name, (_, optimizer) in runs.items():
        floats = count_state_floats(optimizer)
        out[name] = {"step_ms": statistics.median(step_ms[name]), "optimizer_ms": statistics.median(opt_ms[name]),
                     "state_floats": floats, "state_bytes": 4 * floats}
    if BASELINE in out:
        base = out[BASELINE]
        for row in out.values():
            row[f"step_time_vs_{BASELINE}"] = row["step_ms"] / base["step_ms"]
            row[f"state_floats_vs_{BASELINE}"] = row["state_floats"] / base["state_floats"]
    return out
