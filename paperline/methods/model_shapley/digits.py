"""The small-scale game (spec §e): scikit-learn's digits, a 64-h-10 ReLU MLP, the value of a
coalition of hidden neurons (−validation loss with the others masked), pruning curves, and
"train only the top neurons" on a noisy-digits shift. A neuron's parameters are its incoming row
and bias [W1[u] | b1[u]] (the rows the official code scores): zeroing them zeroes the neuron
(ReLU(0) = 0), so the neuron game and the parameter-group game are the same game."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from paperline.data.digits import CLASSES, FEATURES, split_digits
from paperline.io import DataError
from paperline.methods.model_shapley.ranking import keep_masks
from paperline.nn.mlp import MLP
from paperline.seeds import seeded_init


class DigitsDataError(DataError):
    """An array that is not digits features/labels, or a checkpoint that does not fit the MLP."""


def check_arrays(x, y, where: str) -> tuple[np.ndarray, np.ndarray]:
    """(N, 64) finite floats and (N,) integer labels in 0..9, or a DigitsDataError naming `where`."""
    x, y = np.asarray(x), np.asarray(y)
    if x.ndim != 2 or x.shape[1] != FEATURES:
        raise DigitsDataError(f"{where}: features of shape {x.shape}: expected (N, {FEATURES})")
    if not np.issubdtype(x.dtype, np.floating):
        raise DigitsDataError(f"{where}: features of dtype {x.dtype}: expected floating point")
    if not np.isfinite(x).all():
        raise DigitsDataError(f"{where}: features hold NaN or inf")
    if y.shape != (len(x),):
        raise DigitsDataError(f"{where}: labels of shape {y.shape}: expected ({len(x)},), one per row of features")
    if not np.issubdtype(y.dtype, np.integer):
        raise DigitsDataError(f"{where}: labels of dtype {y.dtype}: expected integers")
    if len(y) and (y.min() < 0 or y.max() >= CLASSES):
        raise DigitsDataError(f"{where}: label {int(y.min() if y.min() < 0 else y.max())} outside 0..{CLASSES - 1}")
    return x.astype(np.float32), y.astype(np.int64)


@dataclass(frozen=True)
class Split:
    x: torch.Tensor  # (N, 64) float32 in [0, 1] (plus noise on the shifted task)
    y: torch.Tensor  # (N,) int64

    @classmethod
    def of(cls, x, y, where: str) -> "Split":
        x, y = check_arrays(x, y, where)
        return cls(torch.from_numpy(x), torch.from_numpy(y))


@dataclass(frozen=True)
class DigitsTasks:
    train: Split
    val: Split
    test: Split
    shifted_train: Split
    shifted_test: Split


def load_tasks(val_fraction: float, test_fraction: float, noise_std: float, seed: int) -> DigitsTasks:
    """Seeded train/val/test split of the 1797 digits (pixels / 16), and the shifted task: the
    train and test splits with seeded N(0, noise_std²) pixel noise. The split is LoTA-QAF's
    (`paperline/data/digits.py`), validation rows first."""
    rows = split_digits(seed, test_fraction, val_fraction)
    x, y, train, val, test = rows.x, rows.y, rows.train, rows.val, rows.test
    noise = np.random.default_rng([seed, 1]).normal(0.0, noise_std, size=x.shape).astype(np.float32)
    return DigitsTasks(Split.of(x[train], y[train], "digits train"), Split.of(x[val], y[val], "digits val"),
                       Split.of(x[test], y[test], "digits test"),
                       Split.of(x[train] + noise[train], y[train], "noisy digits train"),
                       Split.of(x[test] + noise[test], y[test], "noisy digits test"))


def make_mlp(hidden: int, seed: int) -> MLP:
    """64 → hidden → 10, ReLU: `model[0]` the hidden layer, `model[1]` its ReLU, `model[2]` the head."""
    with seeded_init(seed):
        return MLP(FEATURES, [hidden], CLASSES)


def sample_batches(split: Split, batch_size: int, count: int, generator: torch.Generator) -> list:
    """`count` random mini-batches (with replacement across batches), for the Fisher estimate."""
    return [(split.x[idx], split.y[idx]) for idx in
            (torch.randint(len(split.y), (batch_size,), generator=generator) for _ in range(count))]


def mean_ce(model, x, y) -> torch.Tensor:
    return F.cross_entropy(model(x), y)


def train_mlp(model: MLP, train: Split, epochs: int, batch_size: int, lr: float, weight_decay: float,
              seed: int, checkpoint_path=None, progress: bool = False) -> dict:
    """Adam (paperline.train.classifier), one checkpoint per epoch (a killed run resumes from the last one)."""
    from paperline.train.classifier import train_classifier

    first = model.linears[0]
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    trained = train_classifier(model, train.x, train.y, optimizer, torch.Generator().manual_seed(seed), epochs=epochs,
                               batch_size=batch_size, checkpoint=checkpoint_path,
                               fingerprint={"epochs": epochs, "batch_size": batch_size, "lr": lr,
                                            "weight_decay": weight_decay, "seed": seed,
                                            "hidden": first.out_features, "loop": "train_classifier"},
                               progress=progress, desc="mlp")
    losses = trained["train_loss"]
    return {"history": {"epoch": list(range(1, len(losses) + 1)), "train_loss": losses},
            "train_time_s": trained["train_seconds"]}


def hidden_activations(model: MLP, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.features(x)


def masked_outputs(model: nn.Sequential, hidden: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
    """Logits (K, N, 10) with the absent neurons of each mask (K, h) zeroed."""
    head = model[2]
    assert isinstance(head, nn.Linear)
    with torch.no_grad():
        return torch.einsum("nh,kh,oh->kno", hidden, masks.to(hidden.dtype), head.weight) + head.bias


def value_function(model: MLP, split: Split):
    """v(S) = −mean cross-entropy on `split` with the neurons outside S masked (spec §e)."""
    hidden = hidden_activations(model, split.x)

    def value(masks: torch.Tensor) -> torch.Tensor:
        logits = masked_outputs(model, hidden, masks)
        ce = F.cross_entropy(logits.reshape(-1, CLASSES), split.y.repeat(len(masks)), reduction="none")
        return -ce.view(len(masks), -1).mean(1)
    return value


def pruning_curve(model: MLP, split: Split, importance: torch.Tensor, fractions: list[float]) -> dict:
    """Accuracy and loss on `split` with the least important fraction of neurons removed."""
    masks = keep_masks(importance, fractions)
    logits = masked_outputs(model, hidden_activations(model, split.x), masks)
    accuracy = (logits.argmax(-1) == split.y).double().mean(1)
    loss = F.cross_entropy(logits.reshape(-1, CLASSES), split.y.repeat(len(masks)), reduction="none")
    return {"fraction": list(fractions), "accuracy": accuracy.tolist(),
            "loss": loss.view(len(masks), -1).mean(1).tolist()}


def finetune_units(model: nn.Sequential, units: list[int], train: Split, test: Split, steps: int, batch_size: int,
                   lr: float, seed: int) -> dict:
    """Train only `units`' incoming rows and biases (the rest frozen) on `train` with Adam; the
    model is copied, not changed. Test accuracy and loss before and after."""
    import copy

    tuned = copy.deepcopy(model)
    for p in tuned.parameters():
        p.requires_grad_(False)
    layer = tuned[0]
    assert isinstance(layer, nn.Linear)
    layer.weight.requires_grad_(True)
    layer.bias.requires_grad_(True)
    keep = torch.zeros(layer.out_features, dtype=torch.bool)
    keep[units] = True
    optimizer = torch.optim.Adam([layer.weight, layer.bias], lr=lr)
    generator = torch.Generator().manual_seed(seed)

    def evaluate():
        with torch.no_grad():
            logits = tuned(test.x)
            return float((logits.argmax(-1) == test.y).double().mean()), float(F.cross_entropy(logits, test.y))

    before = evaluate()
    tuned.train()
    for _ in range(steps):
        idx = torch.randint(len(train.y), (batch_size,), generator=generator)
        optimizer.zero_grad(set_to_none=True)
        mean_ce(tuned, train.x[idx], train.y[idx]).backward()
        assert layer.weight.grad is not None and layer.bias.grad is not None  # the backward's
        layer.weight.grad[~keep] = 0  # only the selected neurons move (Adam keeps zero-grad rows still)
        layer.bias.grad[~keep] = 0
        optimizer.step()
    after = evaluate()
    return {"units": units, "accuracy_before": before[0], "loss_before": before[1],
            "accuracy": after[0], "loss": after[1]}


def sampled_ce(model, x, generator: torch.Generator) -> torch.Tensor:
    """Cross-entropy of labels drawn from the model's own predictive distribution (the Fisher
    information's gradients; estimators.py)."""
    logits = model(x)
    with torch.no_grad():
        labels = torch.multinomial(F.softmax(logits.float(), -1), 1, generator=generator).squeeze(1)
    return F.cross_entropy(logits, labels)
