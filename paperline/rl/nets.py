"""The MLPs every RL piece is built from."""
from __future__ import annotations

import torch
from torch import nn


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
