"""Parameters of the Model Shapley comparison (spec §e): the digits MLP and its noisy-digits shift,
the block-Fisher estimator, the permutation-sampling ground truth, the pruning fractions, the
top-neuron fine-tuning, and the shared causal LM whose MLP neurons are ranked and pruned."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from paperline.config import LMShapeConfig, LMTrainConfig, MethodConfig, ProjectPath, StrictModel

PositiveInt = Annotated[int, Field(ge=1)]
Fraction = Annotated[float, Field(ge=0, lt=1)]

# The rankings compared (rows of metrics/model_shapley.json). `model_shapley` is |Φ|, the official
# code's ranking; `model_shapley_signed` −Φ. `grad_weight` is also what the NLP code's
# calculate_shapley() computes: its cooperative term is multiplied by 0.0 (spec §f).
Estimator = Literal["magnitude", "grad_weight", "obd", "model_shapley", "model_shapley_signed", "paper_sign",
                    "model_shapley_empirical", "random"]
ESTIMATORS: tuple[Estimator, ...] = ("magnitude", "grad_weight", "obd", "model_shapley", "model_shapley_signed",
                                      "paper_sign", "model_shapley_empirical", "random")


class DigitsConfig(StrictModel):
    """scikit-learn's digits (8×8, pixels scaled to [0, 1]) split train/val/test by a seeded
    permutation; a 64-`hidden`-10 ReLU MLP trained with Adam. The shifted task adds seeded
    N(0, noise_std²) pixel noise to every split (the same model, new inputs)."""

    hidden: PositiveInt = 32
    val_fraction: float = Field(0.25, gt=0, lt=0.5)
    test_fraction: float = Field(0.25, gt=0, lt=0.5)
    epochs: PositiveInt = 30
    batch_size: PositiveInt = 64
    lr: float = Field(3e-3, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    noise_std: float = Field(0.5, gt=0)


class EstimatorConfig(StrictModel):
    """The block-Fisher estimator (spec §b): `batches` mini-batches of `batch_size`; `fisher_average`
    `mean` (the official code: every batch weighted equally) or `ewma` (the spec's F ← ρF + (1−ρ)F̂,
    ρ = `rho`, used only then); g is a running mean either way. `fisher`: labels drawn from the model
    (`sampled`, a second backward per batch) or the true labels' gradients (`empirical`), see
    estimators.py."""

    batches: PositiveInt = 10
    batch_size: PositiveInt = 64
    fisher_average: Literal["mean", "ewma"] = "mean"
    rho: float = Field(0.9, ge=0, lt=1)
    fisher: Literal["sampled", "empirical"] = "sampled"

    @property
    def fisher_rho(self) -> float | None:
        """estimators.attribute's `fisher_rho`: None for the uniform mean."""
        return self.rho if self.fisher_average == "ewma" else None


class FinetuneConfig(StrictModel):
    """Train only the top `top_fraction` neurons (incoming weights and bias) on the shifted task."""

    top_fraction: float = Field(0.1, gt=0, le=1)
    steps: PositiveInt = 200
    batch_size: PositiveInt = 64
    lr: float = Field(1e-2, gt=0)
    random_repeats: PositiveInt = 5  # random selections averaged


class LMConfig(StrictModel):
    """The shared causal LM (paperline.nn.causal_lm), trained briefly on the text-corpus stage's
    Shakespeare tokens; its SwiGLU neurons (gate/up rows) are ranked and pruned."""

    corpus_dir: ProjectPath = "data/text/shakespeare"
    block_size: PositiveInt = 64
    shape: LMShapeConfig = LMShapeConfig()
    train: LMTrainConfig = LMTrainConfig()
    estimator: EstimatorConfig = EstimatorConfig(batches=10, batch_size=16)
    eval_windows: PositiveInt = 64


class ModelShapleyConfig(MethodConfig):
    variants: list[Estimator] = Field(default=list(ESTIMATORS), min_length=1)
    # `seeds` (MethodConfig's): each seed its own digits split, MLP, ground truth, LM and estimator
    # batches. Empty: [seed]
    digits: DigitsConfig = DigitsConfig()
    estimator: EstimatorConfig = EstimatorConfig()
    permutations: PositiveInt = 500  # ground truth: permutation-sampling Shapley over the hidden neurons
    permutation_batch: PositiveInt = 25  # permutations evaluated per batched forward (and per checkpoint)
    prune_fractions: list[Fraction] = Field(default=[0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9],
                                            min_length=2)
    finetune: FinetuneConfig = FinetuneConfig()
    # a dict, not LMConfig(): the default is validated with the project root like a given section
    lm: LMConfig = Field(default_factory=dict)  # type: ignore[assignment]  # validated into an LMConfig
    timing_repeats: PositiveInt = 5  # estimator step vs training step: median of this many
    threads: PositiveInt = 1

    @model_validator(mode="after")
    def _consistent(self):
        if len(set(self.variants)) != len(self.variants):
            raise ValueError(f"variants: listed twice in {self.variants}")
        if self.permutations % self.permutation_batch and self.permutations > self.permutation_batch:
            raise ValueError(f"permutations {self.permutations}: not a multiple of permutation_batch "
                             f"{self.permutation_batch}")
        if self.permutations < 2:
            raise ValueError("permutations: at least 2 (the split-half stability needs two halves)")
        return self
