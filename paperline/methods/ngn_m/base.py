"""The problem interface the NGN-M sweep trains through, and epoch-based minibatches: what
problems.py's small problems and the CIFAR and text-LM problems share (their own module, so
`problems.build_problem` imports those two without a cycle)."""
from __future__ import annotations

from typing import Any

import torch


class Problem:
    kind: str
    name: str  # the problem's key in the config (a kind can appear twice: CIFAR-10 and CIFAR-100)
    total_steps: int
    steps_per_epoch: int | None = None

    def parameters(self) -> list[torch.Tensor]:
        raise NotImplementedError

    def batch(self, step: int) -> Any:
        raise NotImplementedError

    def loss(self, batch: Any) -> torch.Tensor:
        raise NotImplementedError

    def evaluate(self) -> dict[str, float]:
        raise NotImplementedError

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {str(i): p.detach().clone() for i, p in enumerate(self.parameters())}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        with torch.no_grad():
            for i, p in enumerate(self.parameters()):
                p.copy_(state[str(i)])


def epoch_permutation(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The shuffle of one epoch, from (seed, epoch) alone."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))


class EpochBatches:
    """Minibatch indices of epoch-based training; the last partial batch of an epoch is dropped
    (every step then averages over the same number of examples)."""

    def __init__(self, n: int, batch_size: int, seed: int):
        if batch_size > n:
            raise ValueError(f"batch_size {batch_size} exceeds the {n} training examples")
        self.n, self.batch_size, self.seed = n, batch_size, seed
        self.steps_per_epoch = n // batch_size
        self._epoch = -1
        self._perm: torch.Tensor | None = None  # this epoch's order

    def indices(self, step: int) -> torch.Tensor:
        epoch, within = divmod(step, self.steps_per_epoch)
        if epoch != self._epoch:
            self._epoch, self._perm = epoch, epoch_permutation(self.n, self.seed, epoch)
        assert self._perm is not None  # set at the first step (epoch 0 ≠ −1)
        return self._perm[within * self.batch_size:(within + 1) * self.batch_size]
