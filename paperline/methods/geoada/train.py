"""Training and evaluation of the EGTN and its fine-tuned variants: the ε-prediction diffusion loss on
windows of trajectories (the displacements from the last conditioning frame diffused), Adam with gradient clipping at
1.0 (GeoTDM), resumable; ADE/FDE of K samples a trajectory (the average over the samples, the
paper's, and the minimum, GeoTDM's minADE/minFDE)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from paperline.data.nbody import Trajectories
from paperline.methods.geoada.egtn import Schedule, sample
from paperline.train.checkpoint import Resumable


@dataclass
class Windows:
    """The conditioning frames and the frames to predict of each trajectory (absolute coordinates)."""

    cond: torch.Tensor  # (S, Tc, N, 3)
    target: torch.Tensor  # (S, H, N, 3)
    charges: torch.Tensor  # (S, N)
    edges: torch.Tensor  # (S, N, N)
    control: torch.Tensor | None = None  # (S,) a global control; (S, H, n, 3) the given subgraph's future

    def __len__(self) -> int:
        return len(self.cond)

    def to(self, device) -> "Windows":
        return Windows(self.cond.to(device), self.target.to(device), self.charges.to(device), self.edges.to(device),
                       None if self.control is None else self.control.to(device))

    def take(self, index) -> "Windows":
        return Windows(self.cond[index], self.target[index], self.charges[index], self.edges[index],
                       None if self.control is None else self.control[index])


def windows(data: Trajectories, cond_frames: int, horizon: int, limit: int | None = None) -> Windows:
    """The last cond_frames + horizon frames of each trajectory (so every task predicts the same
    frames whatever its conditioning window), the first `limit` trajectories."""
    T = data.loc.shape[1]
    if T < cond_frames + horizon:
        raise ValueError(f"trajectories of {T} frames; {cond_frames} + {horizon} needed")
    loc = torch.from_numpy(np.ascontiguousarray(data.loc[:limit, T - horizon - cond_frames:]))
    return Windows(loc[:, :cond_frames], loc[:, cond_frames:], torch.from_numpy(data.charges[:limit]),
                   torch.from_numpy(data.edges[:limit]),
                   None if data.control is None else torch.from_numpy(data.control[:limit]))


@dataclass
class TrainResult:
    steps: list[int]
    loss: list[float]
    seconds: float
    trainable: int
    validation_loss: list[float] = field(default_factory=list)  # at `steps`, where a validation set was given


def split_validation(data: Windows, count: int) -> tuple[Windows, Windows | None]:
    """The training windows less their last `count` (held out), and those `count` (None for 0):
    the validation set a learning rate is chosen on, never the test set."""
    if count <= 0:
        return data, None
    if count >= len(data):
        raise ValueError(f"validation of {count} windows leaves none of the {len(data)} to train on")
    return data.take(slice(0, len(data) - count)), data.take(slice(len(data) - count, None))


@torch.no_grad()
def validation_loss(model: nn.Module, data: Windows, schedule: Schedule, seed: int, draws: int = 2,
                    scale: float = 1.0, chunk: int = 256) -> float:
    """The ε-prediction loss on `data`, each window at `draws` diffusion steps and noises drawn from
    `seed`: the same draws for every model at that seed, so two models' figures differ by the model."""
    was_training = model.training
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    total, count = 0.0, 0
    for _ in range(draws):
        for start in range(0, len(data), chunk):
            part = data.take(slice(start, start + chunk))
            total += diffusion_loss(model, part, schedule, generator, scale).item() * len(part)
            count += len(part)
    model.train(was_training)
    return total / count


def diffusion_loss(model: nn.Module, batch: Windows, schedule: Schedule, generator: torch.Generator,
                   scale: float = 1.0) -> torch.Tensor:
    d0 = (batch.target - batch.cond[:, -1:]) * scale  # displacement from the last given frame, scaled
    # drawn on the CPU generator and moved: the same draws on any device (resumable, comparable)
    t = torch.randint(len(schedule.betas), (len(d0),), generator=generator).to(d0.device)
    eps = torch.randn(d0.shape, generator=generator, dtype=d0.dtype).to(d0.device)
    noisy = schedule.noise(d0, t, eps)
    return ((model(batch.cond, noisy, t, batch.charges, batch.edges, batch.control) - eps) ** 2).mean()


def train(model: nn.Module, data: Windows, schedule: Schedule, steps: int, batch_size: int, lr: float,
          seed: int, checkpoint_path=None, fingerprint=None, every: int = 200, log_every: int = 10,
          progress: bool = False, scale: float = 1.0, validation: Windows | None = None) -> TrainResult:
    """Adam on the parameters that require grad; a killed run resumes from its checkpoint. The model
    and `data` on one device; the random draws come from a CPU generator (its state checkpointed).
    `validation`: its loss (validation_loss at seed `seed`) logged beside the training loss."""
    params = [p for p in model.parameters() if p.requires_grad]
    trainable = sum(p.numel() for p in params)
    generator = torch.Generator().manual_seed(seed)
    if not params or steps == 0:
        return TrainResult([], [], 0.0, trainable)
    optimizer = torch.optim.Adam(params, lr=lr, betas=(0.9, 0.999), eps=1e-8)
    run = Resumable(checkpoint_path, fingerprint, every=every, model=model, optimizer=optimizer, generator=generator)
    state = run.resume() or {"step": 0, "steps": [], "loss": [], "validation_loss": []}
    model.train()
    while state["step"] < steps:
        index = torch.randint(len(data), (batch_size,), generator=generator).to(data.cond.device)
        loss = diffusion_loss(model, data.take(index), schedule, generator, scale)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        state["step"] += 1
        if state["step"] % log_every == 0 or state["step"] == steps:
            value = loss.detach().item()
            state["steps"].append(state["step"])
            state["loss"].append(value)
            if validation is not None:
                state["validation_loss"].append(validation_loss(model, validation, schedule, seed, scale=scale))
            if progress:
                print(f"  step {state['step']}/{steps} loss {value:.4f}", flush=True)
        if run.due(state["step"], steps):
            run.save(state)
    model.eval()
    return TrainResult(state["steps"], state["loss"], run.elapsed(), trainable, state["validation_loss"])


@torch.no_grad()
def evaluate(model: nn.Module, data: Windows, schedule: Schedule, samples: int, seed: int,
             original: bool = False, chunk: int = 256, scale: float = 1.0, given_nodes: int = 0) -> dict[str, float]:
    """ADE (mean distance over the predicted frames and nodes) and FDE (the last frame) of `samples`
    samples a trajectory: averaged over the samples (ade, fde: the paper's) and the best sample's
    (min_ade, min_fde), each then averaged over trajectories. The first `given_nodes` nodes (subgraph
    control's given particles) are not scored."""
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    ades, fdes = [], []
    for start in range(0, len(data), chunk):
        part = data.take(slice(start, start + chunk))
        def rep(a: torch.Tensor) -> torch.Tensor:
            return a.repeat(samples, *([1] * (a.dim() - 1)))

        charges, edges = rep(part.charges), rep(part.edges)
        control = None if part.control is None else rep(part.control)
        pred = sample(lambda c, x, t: model(c, x, t, charges, edges, control, original), schedule,
                      rep(part.cond), part.target.shape[1], generator, scale=scale)
        err = (pred - rep(part.target)).norm(dim=-1).view(samples, len(part), *pred.shape[1:3])  # (K, B, H, N)
        err = err[..., given_nodes:]
        ades.append(err.mean(dim=(2, 3)))
        fdes.append(err[:, :, -1].mean(dim=2))
    ade, fde = torch.cat(ades, dim=1), torch.cat(fdes, dim=1)  # (K, S)
    return {"ade": float(ade.mean()), "fde": float(fde.mean()),
            "min_ade": float(ade.min(dim=0).values.mean()), "min_fde": float(fde.min(dim=0).values.mean())}

