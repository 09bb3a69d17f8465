"""The MLPs every RL piece is built from."""
from __future__ import annotations

import contextlib
from typing import Annotated, Iterator

import torch
from pydantic import Field
from torch import nn

from paperline.config import StrictModel

PositiveInt = Annotated[int, Field(ge=1)]


class BackboneSettings(StrictModel):
    """What SAC and DQN share: their networks (`layers` hidden layers of `hidden` units), Adam's
    learning rate, the batch, the discount, and soft target updates (τ) every `target_every` steps."""

    hidden: PositiveInt = 256
    layers: PositiveInt = 2
    lr: float = Field(3e-4, gt=0)
    batch: PositiveInt = 256
    gamma: float = Field(0.99, gt=0, lt=1)
    tau: float = Field(0.005, gt=0, le=1)
    target_every: PositiveInt = 2


def mlp(inputs: int, hidden: int, layers: int, outputs: int, out: nn.Module | None = None,
        generator: torch.Generator | None = None) -> nn.Sequential:
    """`layers` hidden ReLU layers of width `hidden`; `out` (e.g. nn.Tanh()) after the last linear.
    With `generator`, the weights are drawn from it (PyTorch's default U(±1/√fan_in)), not from the
    global generator, which runs training side by side in threads share."""
    mods: list[nn.Module] = []
    width = inputs
    for _ in range(layers):
        mods += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    mods.append(nn.Linear(width, outputs))
    if out is not None:
        mods.append(out)
    net = nn.Sequential(*mods)
    if generator is not None:
        with torch.no_grad():
            for m in net:
                if isinstance(m, nn.Linear):
                    bound = 1 / m.in_features ** 0.5
                    m.weight.copy_(torch.rand(m.weight.shape, generator=generator) * 2 * bound - bound)
                    m.bias.copy_(torch.rand(m.bias.shape, generator=generator) * 2 * bound - bound)
    return net


@torch.no_grad()
def soft_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    for t, s in zip(target.parameters(), source.parameters()):
        t.lerp_(s, tau)


@contextlib.contextmanager
def no_weight_grads(module: nn.Module) -> Iterator[None]:
    """Inside, `module`'s weights take no gradient while its inputs still do: a loss that only
    steers another network through it (SAC's actor through the critic) skips the weight-gradient
    products, which that network's own optimiser would clear unused before its next step anyway."""
    params = [p for p in module.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in params:
            p.requires_grad_(True)
