"""The step-size sweep: train one (problem, optimizer) at every c of the grid and every seed.

Every run uses `loss = optimizer.step(closure)`, the API of the NGN family, which torch's SGD and
Adam share, so one loop trains all six optimizers. A run whose minibatch loss turns non-finite
is stopped and marked diverged (the closure raises before the optimizer sees the loss). Each
finished run is a finished-unit record, `<out_dir>/c<i>_s<seed>.json`; a variant re-run after a
crash skips the runs already written, and long runs (checkpoint_every) resume mid-run from a
checkpoint.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from paperline.methods.ngn_m.config import CifarConfig, NGNMConfig, TextLMConfig
from paperline.methods.ngn_m.optimizers import NGN_FAMILY, make_optimizer
from paperline.methods.ngn_m.problems import CPU_PROBLEMS, Problem, build_problem
from paperline.optim.ngn import NGNM
from paperline.optim.ngn_md import NGNMD
from paperline.train.checkpoint import Resumable
from paperline.train.records import finished_unit


class Diverged(Exception):
    """The minibatch loss is no longer finite."""


def json_safe(obj: Any) -> Any:
    """Plain JSON: NaN/inf (a diverged run) become None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


@dataclass
class RunResult:
    problem: str
    optimizer: str
    c: float
    seed: int
    final: dict[str, float | None]  # evaluate() at the end; None where not finite
    diverged: bool
    steps: int  # steps taken
    seconds: float
    # sampled every trace_every steps (first seed of a variant only; empty otherwise)
    trace_steps: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)  # minibatch loss f_k
    gamma: list[float] = field(default_factory=list)  # γ_k (NGN family)
    cap: list[float | None] = field(default_factory=list)  # 2f_k/‖g_k‖² (NGN family)

    def to_dict(self) -> dict:
        return json_safe(asdict(self))

    @classmethod
    def from_dict(cls, d: dict) -> "RunResult":
        return cls(**d)


def train_run(problem: Problem, optimizer: str, c: float, cfg: NGNMConfig, *, seed: int,
              trace_every: int = 1, keep_trace: bool = True, checkpoint_path: Path | None = None,
              checkpoint_every: int | None = None, progress: bool = False) -> RunResult:
    opt = make_optimizer(optimizer, problem.parameters(), c, momentum=cfg.momentum,
                         betas=cfg.betas, eps=cfg.eps, weight_decay=cfg.weight_decay)
    fingerprint = {"problem": problem.name, "steps": problem.total_steps, "optimizer": optimizer, "c": c, "seed": seed,
                   "trace_every": trace_every, "keep_trace": keep_trace,
                   **cfg.model_dump(include={"momentum", "betas", "eps", "weight_decay"})}
    run = Resumable(checkpoint_path, fingerprint, checkpoint_every, problem=problem, optimizer=opt)
    record = run.resume() or {"step": 0, "trace": {"trace_steps": [], "loss": [], "gamma": [], "cap": []}}
    step, trace, diverged = record["step"], record["trace"], False

    def closure():
        opt.zero_grad(set_to_none=True)
        loss = problem.loss(batch)
        if not torch.isfinite(loss):
            raise Diverged
        loss.backward()
        return loss.detach()

    bar = tqdm(total=problem.total_steps, initial=step, disable=not progress, leave=False,
               desc=f"{problem.name}/{optimizer} c={c:.1e}")
    while step < problem.total_steps:
        batch = problem.batch(step)
        try:
            loss = opt.step(closure)
        except Diverged:
            diverged = True
            break
        if keep_trace and step % trace_every == 0:
            trace["trace_steps"].append(step)
            trace["loss"].append(float(loss))
            if optimizer in NGN_FAMILY:
                assert isinstance(opt, (NGNM, NGNMD))  # make_optimizer's
                trace["gamma"].append(opt.last_gamma[0])
                trace["cap"].append(opt.last_step_cap)
        step += 1
        bar.update()
        if run.due(step, problem.total_steps):
            run.save({"step": step, "trace": trace})
    bar.close()
    evaluated = problem.evaluate()
    if diverged or not math.isfinite(evaluated["loss"]):
        diverged, evaluated["loss"] = True, math.inf
    final: dict[str, float | None] = dict(evaluated)
    return RunResult(problem.name, optimizer, c, seed, final, diverged, step, run.elapsed(), **trace)


@dataclass
class VariantResult:
    """All runs of one (problem, optimizer): c grid × seeds, and the untrained model's metrics per
    seed (`initial`: what doing nothing scores, evaluated as every run's final model is)."""

    problem: str
    kind: str
    optimizer: str
    c_values: list[float]
    runs: list[RunResult]
    initial: dict[int, dict[str, float | None]] = field(default_factory=dict)

    def finals(self, metric: str) -> np.ndarray:
        """(len(c_values), seeds) array of a final metric; diverged or missing → nan."""
        seeds = sorted({r.seed for r in self.runs})
        out = np.full((len(self.c_values), len(seeds)), np.nan)
        for r in self.runs:
            value = r.final.get(metric)
            if value is not None and not r.diverged:
                out[self.c_values.index(r.c), seeds.index(r.seed)] = value
        return out

    def diverged(self) -> np.ndarray:
        """(len(c_values),) number of diverged seeds at each c."""
        counts = np.zeros(len(self.c_values), dtype=int)
        for r in self.runs:
            counts[self.c_values.index(r.c)] += r.diverged
        return counts

    def first_seed_runs(self) -> list[RunResult]:
        first = min(r.seed for r in self.runs)
        return sorted((r for r in self.runs if r.seed == first), key=lambda r: r.c)

    def to_dict(self) -> dict:
        return {"problem": self.problem, "kind": self.kind, "optimizer": self.optimizer,
                "c_values": self.c_values, "runs": [r.to_dict() for r in self.runs],
                "initial": {str(s): json_safe(m) for s, m in self.initial.items()}}

    @classmethod
    def from_dict(cls, d: dict) -> "VariantResult":
        return cls(d["problem"], d["kind"], d["optimizer"], d["c_values"],
                   [RunResult.from_dict(r) for r in d["runs"]],
                   {int(s): m for s, m in d.get("initial", {}).items()})


def resolve_data_dir(data_dir: str, root: Path) -> Path:
    path = Path(data_dir)
    return path if path.is_absolute() else Path(root) / path


def run_variant(cfg: NGNMConfig, problem_name: str, optimizer: str, out_dir: Path, *,
                root: Path, device: torch.device | None = None, progress: bool = False) -> VariantResult:
    """Every (c, seed) of one (problem, optimizer); finished runs already in out_dir are reused."""
    pcfg = cfg.problems[problem_name]
    if pcfg.kind not in CPU_PROBLEMS:
        assert isinstance(pcfg, (CifarConfig, TextLMConfig))  # the kinds that read data
        pcfg = pcfg.model_copy(update={"data_dir": str(resolve_data_dir(pcfg.data_dir, root))})
        run_device = device or torch.device("cpu")
    else:
        run_device = torch.device("cpu")
    c_values = cfg.c_values_for(problem_name)
    seeds = cfg.seeds_for(problem_name)
    out_dir = Path(out_dir)
    runs = []
    # the untrained model of each seed (its parameters drawn as every run of that seed starts):
    # the trivial baseline, scored by the same evaluate() as the trained runs
    initial = {seed: json_safe(build_problem(problem_name, pcfg, seed, run_device).evaluate()) for seed in seeds}
    bar = tqdm(total=len(c_values) * len(seeds), disable=not progress, desc=f"{problem_name}/{optimizer}")
    # what makes a run besides its own c and seed (the problem as configured: a data_dir as written)
    shared = {"problem": problem_name, "optimizer": optimizer,
              "problem_config": cfg.problems[problem_name].model_dump(mode="json"),
              **cfg.model_dump(mode="json", include={"momentum", "betas", "eps", "weight_decay"})}
    for i, c in enumerate(c_values):
        for seed in seeds:
            keep_trace = seed == seeds[0]

            def train() -> dict:
                problem = build_problem(problem_name, pcfg, seed, run_device)
                checkpoint = out_dir / f"c{i:02d}_s{seed}.pt" if pcfg.checkpoint_every else None
                return train_run(problem, optimizer, c, cfg, seed=seed, trace_every=pcfg.trace_every,
                                 keep_trace=keep_trace, checkpoint_path=checkpoint,
                                 checkpoint_every=pcfg.checkpoint_every, progress=progress).to_dict()

            unit = shared | {"c": c, "seed": seed, "keep_trace": keep_trace}
            # the JSON form, whether trained now or read back
            runs.append(RunResult.from_dict(finished_unit(out_dir / f"c{i:02d}_s{seed}.json", unit, train)))
            bar.update()
    bar.close()
    return VariantResult(problem_name, pcfg.kind, optimizer, c_values, runs, initial)
