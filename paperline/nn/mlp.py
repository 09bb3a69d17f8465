"""The multilayer perceptron of the digits methods (SUMO, NGN-M, LoTA-QAF, Model Shapley, FVAE-LoRA):
in → hidden… → out, `nn.Linear` layers with an activation between them and none after the last.

An `nn.Sequential`, so a method indexes its layers (`model[0]` the first Linear, `model[1]` its
activation) and its state dict keys are `0.weight`, `2.weight`, …; `names` gives the Linear layers
names of their own instead (FVAE-LoRA's adapters target `fc1`, `fc2` by name). Built inside the
caller's RNG context (`paperline.seeds.seeded_init`), with nn.Linear's init; `reset_parameters` draws
the same init from an explicit generator instead (runs in parallel threads share no global RNG)."""
from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Self

import torch
from torch import nn


class MLP(nn.Sequential):
    def __init__(self, in_features: int, hidden: Sequence[int], out_features: int,
                 activation: Callable[[], nn.Module] = nn.ReLU, names: Sequence[str] | None = None):
        widths = [in_features, *hidden, out_features]
        if names is not None and len(names) != len(widths) - 1:
            raise ValueError(f"MLP: {len(names)} names for {len(widths) - 1} linear layers")
        layers: list[tuple[str, nn.Module]] = []
        for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
            last = i == len(widths) - 2
            linear_name = names[i] if names is not None else str(len(layers))
            layers.append((linear_name, nn.Linear(a, b)))
            if not last:
                layers.append((f"{linear_name}_act" if names is not None else str(len(layers)), activation()))
        super().__init__(OrderedDict(layers))

    @property
    def linears(self) -> list[nn.Linear]:
        """The Linear layers, input first (a layer a method replaced, e.g. by nn.Identity, left out)."""
        return [m for m in self if isinstance(m, nn.Linear)]

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The last hidden layer's activations: every module but the output layer."""
        for module in list(self)[:-1]:
            x = module(x)
        return x

    def hidden_weights(self) -> list[nn.Parameter]:
        """The weight matrices of every layer but the output layer."""
        return [w for layer in self.linears[:-1] if isinstance(w := layer.weight, nn.Parameter)]

    @torch.no_grad()
    def reset_parameters(self, generator: torch.Generator) -> Self:
        """nn.Linear's init (kaiming-uniform weights with a = √5, biases U(±1/√fan_in)), layer by
        layer from `generator`."""
        for layer in self.linears:
            nn.init.kaiming_uniform_(layer.weight, a=math.sqrt(5), generator=generator)
            bound = 1 / math.sqrt(layer.weight.shape[1])
            layer.bias.uniform_(-bound, bound, generator=generator)
        return self
