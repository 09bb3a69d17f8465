"""The MLP the optimizers are compared on: 64 → hidden… → 10, ReLU (`paperline.nn.mlp.MLP`).

Its weight matrices except the head are the "matrix" parameters the matrix optimizers (GaLore,
Muon, SUMO) take; biases and the head go to AdamW, as embeddings, norms and the head do in the
GaLore protocol (spec §b step 7). Initialized like torch's nn.Linear, from an explicit generator so
runs in parallel threads do not share the global RNG (`MLP.reset_parameters`)."""
from __future__ import annotations

from torch import nn

from paperline.nn.mlp import MLP


class MatrixMLP(MLP):
    """The MLP with its parameters split as the optimizers take them (optimizers.build_optimizer)."""

    def matrix_parameters(self) -> list[nn.Parameter]:
        return self.hidden_weights()

    def other_parameters(self) -> list[nn.Parameter]:
        matrices = {id(p) for p in self.matrix_parameters()}
        return [p for p in self.parameters() if id(p) not in matrices]
