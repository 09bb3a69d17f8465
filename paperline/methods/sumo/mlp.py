"""The MLP the optimizers are compared on: 64 → hidden… → 10, ReLU.

Its weight matrices except the head are the "matrix" parameters the matrix optimizers (GaLore,
Muon, SUMO) take; biases and the head go to AdamW, as embeddings, norms and the head do in the
GaLore protocol (spec §b step 7). Initialized like torch's nn.Linear, from an explicit generator so
runs in parallel threads do not share the global RNG."""
from __future__ import annotations

import math

import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self, in_features: int, hidden_sizes: list[int], classes: int):
        super().__init__()
        widths = [in_features, *hidden_sizes]
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.head = nn.Linear(widths[-1], classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.hidden:
            x = torch.relu(layer(x))
        return self.head(x)

    def matrix_parameters(self) -> list[nn.Parameter]:
        matrices = []
        for layer in self.hidden:
            assert isinstance(layer, nn.Linear) and isinstance(layer.weight, nn.Parameter)  # __init__'s
            matrices.append(layer.weight)
        return matrices

    def other_parameters(self) -> list[nn.Parameter]:
        matrices = {id(p) for p in self.matrix_parameters()}
        return [p for p in self.parameters() if id(p) not in matrices]


def init_mlp(model: MLP, generator: torch.Generator) -> MLP:
    """nn.Linear's default init (kaiming-uniform weights with a=√5, uniform biases)."""
    with torch.no_grad():
        for layer in [*model.hidden, model.head]:
            nn.init.kaiming_uniform_(layer.weight, a=math.sqrt(5), generator=generator)
            bound = 1 / math.sqrt(layer.weight.shape[1])
            layer.bias.uniform_(-bound, bound, generator=generator)
    return model
