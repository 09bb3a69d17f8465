"""The ill-conditioned linear adaptation (spec §e.1): W₀ ∈ ℝ^{n×n}, W* = W₀ + Δ with Δ = U·diag(σ)·Vᵀ
(σ = 10, 3, 1, 0.3 by default: condition number 33), x ~ N(0, I), y = W*x + noise·ξ. A LoRA (peft,
on the one linear layer, A Kaiming-uniform, B = 0) or the whole W (full fine-tuning) is trained
on the mean squared error with fresh minibatches; every `log_every` steps we record the loss on a
fixed held-out set and ‖ΔW − Δ‖_F (ΔW = s·B·A, or W − W₀ for full fine-tuning).

The batches and W₀, Δ, the held-out set depend on the seed alone, so every optimizer, rank and
rescaling c sees the same data; peft's initialisation draws from its own seeded RNG."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from paperline.methods.altlora.adapters import add_lora, expected_state_floats, make_optimizer, rescale
from paperline.methods.altlora.config import LinearConfig, OptimizerName, OptimizerSettings
from paperline.optim.altlora import count_state_floats, lora_pairs
from paperline.seeds import seeded_init


@dataclass(frozen=True)
class LinearProblem:
    W0: torch.Tensor
    delta: torch.Tensor
    x_eval: torch.Tensor
    y_eval: torch.Tensor

    @property
    def target(self) -> torch.Tensor:
        return self.W0 + self.delta


def make_problem(cfg: LinearConfig, seed: int) -> LinearProblem:
    g = torch.Generator().manual_seed(seed)
    n, m = cfg.dim, len(cfg.singular_values)
    W0 = torch.randn(n, n, generator=g) / math.sqrt(n)
    U, _ = torch.linalg.qr(torch.randn(n, m, generator=g))
    V, _ = torch.linalg.qr(torch.randn(n, m, generator=g))
    delta = U @ torch.diag(torch.tensor(cfg.singular_values)) @ V.T
    x = torch.randn(cfg.eval_samples, n, generator=g)
    y = x @ (W0 + delta).T + cfg.noise * torch.randn(cfg.eval_samples, n, generator=g)
    return LinearProblem(W0, delta, x, y)


class LinearModel(nn.Module):
    """y = W·x with W = W₀ at the start: the layer LoRA adapts (`proj`)."""

    def __init__(self, W0: torch.Tensor):
        super().__init__()
        self.proj = nn.Linear(W0.shape[1], W0.shape[0], bias=False)
        with torch.no_grad():
            self.proj.weight.copy_(W0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


def build(name: OptimizerName, problem: LinearProblem, rank: int, c: float, lr: float, cfg: LinearConfig,
          settings: OptimizerSettings, seed: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    """The model (peft-wrapped unless full fine-tuning), rescaled by c, and its optimizer."""
    base = LinearModel(problem.W0)
    model: nn.Module
    if name == "full_ft":
        model = base
    else:
        base.proj.weight.requires_grad_(False)
        with seeded_init(seed):  # peft draws A from the global RNG: seed it, leave it as it was
            model = add_lora(base, ["proj"], rank, cfg.alpha, 0.0, where="linear")
        rescale(model, c)
    return model, make_optimizer(name, model, lr, settings)


@torch.no_grad()
def adapted_delta(model: nn.Module, problem: LinearProblem) -> torch.Tensor:
    """ΔW = s·B·A (LoRA) or W − W₀ (full fine-tuning)."""
    if isinstance(model, LinearModel):
        return model.proj.weight - problem.W0
    # a tensor: a LoRA model has its pairs (sum's int start types it Tensor | int)
    return cast(torch.Tensor, sum(p.scale * p.B @ p.A for p in lora_pairs(model)))


@torch.no_grad()
def evaluate(model: nn.Module, problem: LinearProblem) -> tuple[float, float]:
    """(held-out loss, ‖ΔW − Δ‖_F)"""
    loss = F.mse_loss(model(problem.x_eval), problem.y_eval).item()
    return loss, torch.linalg.matrix_norm(adapted_delta(model, problem) - problem.delta).item()


def train_linear(name: OptimizerName, problem: LinearProblem, rank: int, c: float, lr: float, cfg: LinearConfig,
                 settings: OptimizerSettings, seed: int) -> dict:
    """One run; a non-finite loss or error ends it as diverged (final values None)."""
    model, optimizer = build(name, problem, rank, c, lr, cfg, settings, seed)
    g = torch.Generator().manual_seed(seed + 1)
    target = problem.target
    history: dict[str, list] = {"step": [], "loss": [], "error": []}

    def log(step: int) -> bool:
        loss, error = evaluate(model, problem)
        history["step"].append(step)
        history["loss"].append(loss)
        history["error"].append(error)
        return math.isfinite(loss) and math.isfinite(error)

    ok = log(0)
    for step in range(1, cfg.steps + 1):
        x = torch.randn(cfg.batch_size, cfg.dim, generator=g)
        y = x @ target.T + cfg.noise * torch.randn(cfg.batch_size, cfg.dim, generator=g)
        optimizer.zero_grad(set_to_none=True)
        F.mse_loss(model(x), y).backward()
        optimizer.step()
        if step % cfg.log_every == 0 or step == cfg.steps:
            ok = log(step)
            if not ok:
                break
    return {"optimizer": name, "rank": rank, "c": c, "lr": lr, "diverged": not ok, "history": history,
            "final_loss": history["loss"][-1] if ok else None, "final_error": history["error"][-1] if ok else None,
            "relative_error": history["error"][-1] / torch.linalg.matrix_norm(problem.delta).item() if ok else None,
            "state_floats": count_state_floats(optimizer), "state_floats_formula": expected_state_floats(name, model)}


def best_run(runs: list[dict]) -> dict | None:
    """The lowest final held-out loss among the runs that did not diverge."""
    finite = [r for r in runs if not r["diverged"]]
    return min(finite, key=lambda r: r["final_loss"]) if finite else None

