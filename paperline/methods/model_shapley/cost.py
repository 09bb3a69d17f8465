"""The cost claim (spec §a: about one backward per batch): the wall time of one estimator batch
(forward, backward, per-example block statistics; with the sampled Fisher a second forward and
backward) against one plain training step (forward, backward, AdamW step) on the same batch."""
from __future__ import annotations

import copy
import statistics
import time

import torch

from paperline.methods.model_shapley import estimators


def step_times(model, layers_of, x, y, loss_of, sampled_loss_of, fisher_rho: float | None,
               repeats: int) -> dict:
    """Median seconds of a training step and of an estimator batch, on copies of `model`
    (`layers_of(copy)` names the copy's scored blocks); the first call of each is a warm-up."""
    trained = copy.deepcopy(model).train()
    optimizer = torch.optim.AdamW(trained.parameters(), lr=1e-4)

    def train_step():
        optimizer.zero_grad(set_to_none=True)
        loss_of(trained, x, y).backward()
        optimizer.step()

    scored = copy.deepcopy(model)

    def estimator_step():
        estimators.attribute(scored, layers_of(scored), [(x, y)], loss_of, fisher_rho, sampled_loss_of)

    times = {}
    for name, step in (("train_step_s", train_step), ("estimator_step_s", estimator_step)):
        step()
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            step()
            samples.append(time.perf_counter() - start)
        times[name] = statistics.median(samples)
    times["estimator_over_train_step"] = times["estimator_step_s"] / times["train_step_s"]
    return times
