"""The compared optimizers, built for a model by name, and the spec's state-size formulas.

    adamw         torch.optim.AdamW on every parameter (the baseline; torch's own)
    galore_adamw  GaLore-AdamW on the matrices, AdamW on the rest
    muon          Muon (NS5, full rank) on the matrices, AdamW on the rest
    sumo          SUMO (exact SVD) on the matrices, AdamW on the rest
    sumo_ns       SUMO with Muon's NS5 inside the subspace: the ablation of the exact SVD (spec pitfall)
"""
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from paperline.io import write_json
from paperline.methods.sumo.config import SumoConfig
from paperline.methods.sumo.mlp import MatrixMLP
from paperline.nn.causal_lm import CausalLM
from paperline.optim.galore import GaLoreAdamW
from paperline.optim.muon import Muon
from paperline.optim.sumo import SUMO
from paperline.train.distributed import DistributedConfig, DistributedError

LABELS = {"adamw": "AdamW", "galore_adamw": "GaLore-AdamW", "muon": "Muon (NS5)", "sumo": "SUMO (SVD)",
          "sumo_ns": "SUMO with NS5"}


def build_optimizer(name: str, model: MatrixMLP | CausalLM, lr: float, cfg: SumoConfig, seed: int = 0) -> torch.optim.Optimizer:
    """`model` tells its matrices (matrix_parameters) from the rest (other_parameters)."""
    if name == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=cfg.weight_decay)
    groups = [{"params": model.matrix_parameters()},
              {"params": model.other_parameters(), "adamw": True,
               "lr": cfg.adamw_part_lr if cfg.adamw_part_lr is not None else lr}]
    if name == "galore_adamw":
        return GaLoreAdamW(groups, lr=lr, rank=cfg.rank, update_period=cfg.update_period, alpha=cfg.alpha,
                           weight_decay=cfg.weight_decay)
    if name == "muon":
        return Muon(groups, lr=lr, momentum=cfg.muon_momentum, weight_decay=cfg.weight_decay)
    if name in ("sumo", "sumo_ns"):
        return SUMO(groups, lr=lr, rank=cfg.rank, update_period=cfg.update_period, alpha=cfg.alpha,
                    momentum=cfg.sumo_momentum, limiter=cfg.limiter, weight_decay=cfg.weight_decay,
                    orthogonalization="svd" if name == "sumo" else "newton_schulz", seed=seed)
    raise ValueError(f"unknown optimizer {name!r}; known: {', '.join(LABELS)}")


def matrix_state_formula(name: str, shape: tuple[int, ...], rank: int) -> int:
    """Optimizer-state floats of one m×n matrix by the spec's formulas (§b step 8), written for the
    projected side s = min(m, n) and the other side l = max(m, n) (the spec's m ≤ n case)."""
    m, n = shape
    s, l = min(m, n), max(m, n)
    return {"adamw": 2 * m * n, "muon": m * n, "galore_adamw": 2 * l * rank + s * rank,
            "sumo": l * rank + s * rank, "sumo_ns": l * rank + s * rank}[name]


def state_formula(name: str, model: MatrixMLP | CausalLM, rank: int) -> int:
    """Floats of the whole optimizer state: the formula for each matrix, 2 per entry (AdamW) for the rest."""
    if name == "adamw":
        return sum(2 * p.numel() for p in model.parameters())
    return (sum(matrix_state_formula(name, tuple(p.shape), rank) for p in model.matrix_parameters())
            + sum(2 * p.numel() for p in model.other_parameters()))


class OptimizerFactory:
    """`build_optimizer` as the shared loop's `optimizer_factory` (paperline/train/lm.py): a plain
    object, not a closure, so that a training spread over processes (`train_lm_spread`) pickles it
    and builds the optimizer in each process on that process's copy of the model (SUMO's subspaces
    are seeded by (seed, parameter, step): every process draws the same ones, and DDP's averaged
    gradient gives every process the same update). `optimizer` is the one built in this process.

    After every optimizer step (a step post-hook) `record` keeps, with `condition_every`, the κ of
    SUMO's moments at every logged step that is a multiple of it (text_lm; a caller keeps the
    samples at steps its history logged). With `record_to` (a spawned process's optimizer does not
    come back) rank 0 also keeps there what the caller would otherwise read off `optimizer`: the
    state's floats and bytes, the limiter's hits, the peak CUDA memory and `sampler`'s state
    (pickled in the same call as this factory, so in a spawned process it is that process's
    sampler), rewriting the file at every step: the spread loop has no end-of-run hook. `record["step"]` counts this process's steps (a resumed run's κ steps would start again
    at 1: text_lm checkpoints only at its end, so it never resumes mid-run)."""

    def __init__(self, name: str, lr: float, cfg: SumoConfig, seed: int, record_to: str | None = None,
                 sampler=None, condition_every: int | None = None, log_every: int = 1, steps: int = 0):
        self.name, self.lr, self.cfg, self.seed = name, lr, cfg, seed
        self.record_to, self.sampler = record_to, sampler
        self.condition_every, self.log_every, self.steps = condition_every, log_every, steps
        self.optimizer: torch.optim.Optimizer | None = None
        self.record: dict[str, Any] | None = None

    def __call__(self, model: MatrixMLP | CausalLM) -> torch.optim.Optimizer:
        optimizer = self.optimizer = build_optimizer(self.name, model, self.lr, self.cfg, seed=self.seed)
        self.matrices = model.matrix_parameters()
        self.record = {"step": 0, "condition": {"step": [], "median": [], "max": [], "per_matrix": []}}
        optimizer.register_step_post_hook(lambda *_: self._after_step())
        return optimizer

    def _after_step(self) -> None:
        import numpy as np

        from paperline.optim.hybrid import state_bytes, state_numel

        record, optimizer = self.record, self.optimizer
        assert record is not None and optimizer is not None  # __call__'s
        done = record["step"] = record["step"] + 1
        writes = self.record_to is not None and rank() == 0
        if writes:  # in one process the caller reads these off `optimizer` once, at the end
            device = self.matrices[0].device
            record.update(state_floats=state_numel(optimizer), state_bytes=state_bytes(optimizer),
                          limiter_hits=sum(s.get("limiter_hits", 0) for s in optimizer.state.values()),
                          peak_memory_bytes=torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None,
                          sampler=self.sampler.state_dict() if self.sampler is not None else None)
        logged = done % self.log_every == 0 or done == self.steps
        # a diverging step (its loss not finite) is never logged: no κ of its (non-finite) moments
        if (self.condition_every and logged and done % self.condition_every == 0
                and all(bool(torch.isfinite(s["moment"]).all()) for s in optimizer.state.values() if "moment" in s)):
            values = moment_condition_numbers(optimizer, self.matrices)
            if values:
                kappa = record["condition"]
                kappa["step"].append(done)
                kappa["median"].append(float(np.median(values)))
                kappa["max"].append(max(values))
                kappa["per_matrix"].append(values)
        if writes:
            assert self.record_to is not None  # writes says so
            with open(self.record_to, "w") as f:
                json.dump(record, f)


def rank() -> int:
    """This process's rank in a spread training (0 outside one)."""
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def condition_number(matrix: torch.Tensor) -> float:
    """σ_max/σ_min of `matrix` over its min(rows, cols) singular values (fp64); inf when singular."""
    sigma = torch.linalg.svdvals(matrix.detach().double())
    return float(sigma[0] / sigma[-1]) if sigma[-1] > 0 else math.inf


def moment_condition_numbers(optimizer: torch.optim.Optimizer, params: Sequence[torch.Tensor]) -> list[float]:
    """κ of the low-rank moment of each of `params` that has one (SUMO's state["moment"]), in order."""
    return [condition_number(optimizer.state[p]["moment"]) for p in params
            if "moment" in optimizer.state.get(p, {})]


def refuse_fsdp(distributed: DistributedConfig, where: str = "runtime.distributed.strategy") -> None:
    """FSDP shards each weight matrix over the processes; GaLore, SUMO and Muon project or
    orthogonalise whole matrices, so they train data-parallel (DDP) only."""
    if distributed.strategy == "fsdp":
        raise DistributedError(f"{where}: fsdp shards the weight matrices that SUMO's optimizers act on "
                               "whole; use ddp")


def read_record(record_to: str, checkpoint_path: Path | None, steps: int) -> dict:
    """The spawned optimizer's record (OptimizerFactory), kept beside the checkpoint: a run that
    resumes at its end takes no step, and reads the record its last try wrote."""
    kept = Path(checkpoint_path).with_suffix(".optimizer.json") if checkpoint_path is not None else None
    if Path(record_to).is_file():
        record = json.loads(Path(record_to).read_text())
        if kept is not None:
            write_json(kept, record)  # atomic: read back by a resume
        return record
    if kept is not None and kept.is_file():
        return json.loads(kept.read_text())
    raise RuntimeError(f"the spread training took no step ({steps} done) and left no optimizer record")
