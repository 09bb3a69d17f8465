"""Parameters of the NGN-M step-size sweep: optimizers × c grid × seeds on each problem.

c is the one step-size hyperparameter of every optimizer: NGN's c, and the learning rate of SGD,
SGD with momentum and Adam. `problems` maps a name (used in variant names, file names and the
metrics columns) to a problem of one `kind`; a problem may override the method-wide optimizers,
c grid and seeds (the paper compares NGN-M with SGDM on CIFAR and NGN-MD with Adam on language
models, not every optimizer everywhere).
"""
from __future__ import annotations

from typing import Annotated, Literal, Union

import numpy as np
from pydantic import Field, ValidationInfo, field_validator, model_validator

from paperline.config import MethodConfig, ProjectPath, StrictModel

PositiveInt = Annotated[int, Field(ge=1)]
OptimizerName = Literal["sgd", "sgdm", "adam", "ngn", "ngn_m", "ngn_md"]
ALL_OPTIMIZERS: list[OptimizerName] = ["sgd", "sgdm", "adam", "ngn", "ngn_m", "ngn_md"]
PROBLEM_KINDS = ("least_squares", "rosenbrock", "digits", "cifar", "text_lm")


class CGrid(StrictModel):
    """c = logspace(low, high, points) (exponents of 10)."""

    low: float = -4.0
    high: float = 2.0
    points: PositiveInt = 13

    @model_validator(mode="after")
    def _ordered(self):
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be ≥ low ({self.low})")
        if self.points == 1 and self.high != self.low:
            raise ValueError("one point needs low == high")
        return self

    def values(self) -> list[float]:
        return [float(c) for c in np.logspace(self.low, self.high, self.points)]


def _unique(values: list | None, info: ValidationInfo) -> list | None:
    if values is not None and len(set(values)) != len(values):
        raise ValueError(f"{info.field_name} repeat a value: {values}")
    return values


class ProblemConfig(StrictModel):
    # null: the method-wide value
    optimizers: list[OptimizerName] | None = Field(None, min_length=1)
    c_grid: CGrid | None = None
    seeds: list[int] | None = Field(None, min_length=1)
    # steps between γ_k samples kept for the trace (the loss curve is sampled the same way)
    trace_every: PositiveInt = 1
    # checkpoint a run every this many steps (long runs only: a killed run resumes there)
    checkpoint_every: PositiveInt | None = None

    _unique_lists = field_validator("optimizers", "seeds")(_unique)


class LeastSquaresConfig(ProblemConfig):
    """f(w, b) = 1/(2|S|) Σ_S (x_i·w + b − y_i)² on scikit-learn's diabetes data, X and y standardized."""

    kind: Literal["least_squares"]

    batch_size: PositiveInt = 16
    epochs: PositiveInt = 20


class RosenbrockConfig(ProblemConfig):
    """Stochastic Rosenbrock [I]: f_ξ(x) = Σ_i (ξ_i − x_i)² + 100(x_{i+1} − x_i²)², ξ_i ~ N(1, σ²).
    E f = Rosenbrock + (dim−1)σ², minimized at x = 1 with value (dim−1)σ² (no interpolation)."""

    kind: Literal["rosenbrock"]

    dim: Annotated[int, Field(ge=2)] = 2
    noise: float = Field(0.3, ge=0)  # σ
    batch_size: PositiveInt = 8
    steps: PositiveInt = 1000
    start: list[float] = Field(default_factory=lambda: [-1.2, 1.0])  # tiled to dim
    start_jitter: float = Field(0.1, ge=0)  # per-seed N(0, jitter²) added to the start


class DigitsConfig(ProblemConfig):
    """A 2-layer ReLU MLP on scikit-learn's 8×8 digits (1,797 real images), cross-entropy."""

    kind: Literal["digits"]

    hidden: PositiveInt = 64
    batch_size: PositiveInt = 32
    epochs: PositiveInt = 20
    test_fraction: float = Field(0.2, gt=0, lt=1)


class CifarConfig(ProblemConfig):
    """ResNet-(6n+2) on CIFAR-10/100 in the python pickle format (cifar-10-batches-py/,
    cifar-100-python/), read from data_dir (relative to the project root or absolute)."""

    kind: Literal["cifar"]

    data_dir: ProjectPath
    dataset: Literal["cifar10", "cifar100"] = "cifar10"
    depth: Annotated[int, Field(ge=8)] = 20
    epochs: PositiveInt = 50
    batch_size: PositiveInt = 128
    augment: bool = True  # random crop (pad 4) + horizontal flip
    train_limit: PositiveInt | None = None  # first N training images only (smoke on real data)
    eval_batch_size: PositiveInt = 1000

    @field_validator("depth")
    @classmethod
    def _resnet_depth(cls, depth: int) -> int:
        if (depth - 2) % 6:
            raise ValueError(f"a CIFAR ResNet has depth 6n+2 (20, 32, 44, 56, 110, …), got {depth}")
        return depth


class TextLMConfig(ProblemConfig):
    """The shared causal LM (LLaMA-style, `paperline.nn.causal_lm`; [I] GPT-2-style before) on token
    files in nanoGPT's format (data_dir/train.bin and val.bin: flat uint16 token ids), next-token
    cross-entropy."""

    kind: Literal["text_lm"]

    data_dir: ProjectPath
    vocab_size: PositiveInt = 50304  # GPT-2's 50257 padded to a multiple of 64, as nanoGPT does
    n_layer: PositiveInt = 6
    n_head: PositiveInt = 6
    n_embd: PositiveInt = 384
    block_size: PositiveInt = 256
    batch_size: PositiveInt = 64
    steps: PositiveInt = 5000
    eval_batches: PositiveInt = 50

    @model_validator(mode="after")
    def _heads_divide_width(self):
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be a multiple of n_head ({self.n_head})")
        return self


ProblemSpec = Annotated[Union[LeastSquaresConfig, RosenbrockConfig, DigitsConfig, CifarConfig, TextLMConfig],
                       Field(discriminator="kind")]
ProblemName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$")]  # file and metric-key safe


class NGNMConfig(MethodConfig):
    optimizers: list[OptimizerName] = Field(default_factory=lambda: list(ALL_OPTIMIZERS), min_length=1)
    c_grid: CGrid = Field(default_factory=CGrid)
    # `seeds` (MethodConfig's): every (problem, optimizer, c) runs once per seed (a problem's own
    # `seeds` in its place)
    momentum: float = Field(0.9, ge=0, lt=1)  # β of NGN-M and SGDM (torch's SGD momentum)
    betas: tuple[Annotated[float, Field(ge=0, lt=1)], Annotated[float, Field(ge=0, lt=1)]] = (0.9, 0.999)
    eps: float = Field(1e-8, gt=0)  # NGN-MD and Adam
    weight_decay: float = Field(0.0, ge=0)  # decoupled for the NGN family, torch's own for the rest
    band: float = Field(0.1, gt=0, lt=1)  # "within 10% of its best result"
    problems: dict[ProblemName, ProblemSpec] = Field(min_length=1)

    _unique_optimizers = field_validator("optimizers")(_unique)

    def optimizers_for(self, problem: str) -> list[str]:
        return list(self.problems[problem].optimizers or self.optimizers)

    def c_values_for(self, problem: str) -> list[float]:
        return (self.problems[problem].c_grid or self.c_grid).values()

    def seeds_for(self, problem: str) -> list[int]:
        return list(self.problems[problem].seeds or self.run_seeds())
