"""Parameters of the AltLoRA experiments (spec §e): the ill-conditioned linear adaptation and the
LM adaptation of the shared Shakespeare base (`lm-base`) to a second text. Each optimizer has its
own lr grid; the linear experiment sweeps it at c = 1 and reruns the best lr under the rescaled
initialisations (A·c, B/c)."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from paperline.config import MethodConfig, ProjectPath, StrictModel

PositiveInt = Annotated[int, Field(ge=1)]
PositiveFloat = Annotated[float, Field(gt=0)]
OptimizerName = Literal["lora_adamw", "lora_sgdm", "scaledgd", "altlora", "altlora_plus", "lora_pro", "full_ft"]
BASELINE = "lora_adamw"  # state memory and step time are reported against it


class OptimizerSettings(StrictModel):
    """Shared by every optimizer where it applies. Defaults: the repo's (spec §b), but weight decay,
    which is 0 here (the repo's 1e-5 is negligible at these step counts)."""

    betas: tuple[float, float] = (0.9, 0.999)
    altlora_eps: PositiveFloat = 1e-4  # AltLoRA+'s Adam eps (the repo's)
    adam_eps: PositiveFloat = 1e-8  # LoRA-AdamW, LoRA-Pro-like, full FT (torch's)
    reg: float = Field(1e-5, ge=0)  # ε of (BᵀB + εI)⁻¹ and (AAᵀ + εI)⁻¹
    weight_decay: float = Field(0.0, ge=0)
    alter_freq: PositiveInt = 10  # AltLoRA / AltLoRA+: steps per factor before switching
    sgd_momentum: float = Field(0.9, ge=0, lt=1)


class LinearConfig(StrictModel):
    """Spec §e.1: W* = W₀ + Δ, rank(Δ) = len(singular_values), x ~ N(0, I), y = W*x + noise·ξ."""

    dim: PositiveInt = 64
    singular_values: list[PositiveFloat] = Field(default=[10.0, 3.0, 1.0, 0.3], min_length=1)
    noise: float = Field(0.01, ge=0)
    ranks: list[PositiveInt] = Field(default=[4, 8], min_length=1)
    alpha: PositiveFloat = 16.0  # s = α/r
    scales: list[PositiveFloat] = Field(default=[0.1, 1.0, 10.0], min_length=1)  # c of (A·c, B/c)
    steps: PositiveInt = 2000
    batch_size: PositiveInt = 64
    eval_samples: PositiveInt = 1024
    log_every: PositiveInt = 20
    lr_grid: dict[OptimizerName, list[PositiveFloat]]


class LMAdaptConfig(StrictModel):
    """The Shakespeare base adapted to a second public-domain text (the KJV slice by default)."""

    base: ProjectPath = "data/lm_base"  # a transformers causal-LM directory (local files only)
    corpus: ProjectPath = "data/text/shakespeare"  # its tokenizer, and its held-out text (forgetting)
    target_text: ProjectPath = "data/raw/kjv"  # *.txt with SHA256SUMS
    # the Shakespeare slice: held-out speeches for a base with its own tokenizer.json (texts.py)
    source_text: ProjectPath = "data/raw/shakespeare"
    target_modules: list[str] = Field(default=["q_proj", "k_proj", "v_proj", "o_proj"], min_length=1)
    # the optimizers this part runs (None: all of the method's); LoRA-AdamW among them
    optimizers: list[OptimizerName] | None = None
    rank: PositiveInt = 8
    alpha: PositiveFloat = 16.0
    dropout: float = Field(0.05, ge=0, lt=1)
    val_fraction: float = Field(0.1, gt=0, lt=1)  # the target text's tail, held out
    block_size: PositiveInt = 128
    steps: PositiveInt = 200
    batch_size: PositiveInt = 16
    warmup_steps: int = Field(10, ge=0)
    min_lr_ratio: float = Field(0.1, ge=0, le=1)  # cosine decay to this share of the lr
    grad_clip: PositiveFloat = 1.0
    eval_every: PositiveInt = 100
    eval_windows: PositiveInt = 32
    log_every: PositiveInt = 10
    checkpoint_every: PositiveInt = 100
    lr_grid: dict[OptimizerName, list[PositiveFloat]]

    @model_validator(mode="after")
    def _schedule(self) -> "LMAdaptConfig":
        if self.warmup_steps >= self.steps:
            raise ValueError(f"warmup_steps {self.warmup_steps} ≥ steps {self.steps}")
        return self


class AltLoRAConfig(MethodConfig):
    """`seeds` (MethodConfig's): the runs the claims pair by. Linear: each seed its own problem (W₀,
    Δ, data, initialisation), the lr grid (and the other ranks) at the first, each optimizer's best
    lr at the first rank and every c at all of them. LM: the lr grid at the first seed, each
    optimizer's best lr at every other (its LoRA initialisation, batches and dropout; one held-out
    text, split by `seed`)."""

    optimizers: list[OptimizerName] = Field(
        default=["lora_adamw", "lora_sgdm", "scaledgd", "altlora", "altlora_plus", "lora_pro", "full_ft"], min_length=1)
    settings: OptimizerSettings = OptimizerSettings()
    linear: LinearConfig
    lm: LMAdaptConfig | None = None  # None: the linear experiment only
    # step time and state memory (timing.py): a stack of timing_layers square layers of timing_dim
    timing_dim: PositiveInt = 256
    timing_layers: PositiveInt = 4
    timing_rank: PositiveInt = 8
    timing_rounds: PositiveInt = 3
    timing_steps: PositiveInt = 10

    @property
    def lm_optimizers(self) -> list[OptimizerName]:
        if self.lm is None:
            return []
        return list(self.lm.optimizers) if self.lm.optimizers is not None else list(self.optimizers)

    @model_validator(mode="after")
    def _consistent(self) -> "AltLoRAConfig":
        if BASELINE not in self.optimizers:
            raise ValueError(f"optimizers must include {BASELINE}: state memory and step time are reported against it")
        for block, names, grid in (("linear", self.optimizers, self.linear.lr_grid),
                                   ("lm", self.lm_optimizers, self.lm.lr_grid if self.lm else None)):
            if grid is not None:
                missing = [name for name in names if not grid.get(name)]
                if missing:
                    raise ValueError(f"{block}.lr_grid has no learning rates for {missing}")
        if self.lm is not None:
            if BASELINE not in self.lm_optimizers:
                raise ValueError(f"lm.optimizers must include {BASELINE}")
            unknown = [n for n in self.lm_optimizers if n not in self.optimizers]
            if unknown:
                raise ValueError(f"lm.optimizers {unknown} are not in optimizers")
        if self.timing_rank > self.timing_dim:
            raise ValueError(f"timing_rank {self.timing_rank} exceeds timing_dim {self.timing_dim}")
        too_big = [r for r in self.linear.ranks if r > self.linear.dim]
        if too_big:
            raise ValueError(f"linear.ranks {too_big} exceed linear.dim {self.linear.dim}")
        if len(self.linear.singular_values) > self.linear.dim:
            raise ValueError(f"linear.singular_values: {len(self.linear.singular_values)} values for a "
                             f"{self.linear.dim}×{self.linear.dim} matrix")
        return self
