"""Parameters of the LoTA-QAF comparison (spec §e): a digits MLP and the shared Shakespeare LM,
quantised per group at each bit width, then recovered for a fixed step budget by LoTA (ternary
adapters, t-SignSGD), 16-bit LoRA (peft, naive re-quantised merge) and a QA-LoRA-style adapter."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from paperline.config import MethodConfig, ProjectPath, StrictModel
from paperline.methods.lota_qaf.quant import BIT_WIDTHS

PositiveInt = Annotated[int, Field(ge=1)]
TaskName = Literal["digits", "lm"]
MethodName = Literal["lota", "lora", "qalora"]
TASKS: tuple[TaskName, ...] = ("digits", "lm")
METHODS: tuple[MethodName, ...] = ("lota", "lora", "qalora")  # the recovery methods, each after the quantised model


class LotaSettings(StrictModel):
    rank: PositiveInt = 8
    # ω, sized to r: U = AB ∈ [−r, r]. None: round(0.75 r) (the repo's 48 for r = 64)
    omega: Annotated[int, Field(ge=1)] | None = None

    @model_validator(mode="after")
    def _omega_below_rank(self):
        if self.omega is not None and self.omega >= self.rank:
            raise ValueError(f"omega {self.omega} must be below rank {self.rank}: U = AB lies in [−r, r], "
                             "so no entry would ever pass the threshold")
        return self

    def threshold(self) -> int:
        return self.omega if self.omega is not None else max(1, round(0.75 * self.rank))


class AdapterSettings(StrictModel):
    """16-bit LoRA (peft) and the QA-LoRA-style adapter: AdamW at a constant lr."""
    rank: PositiveInt = 8
    alpha: float = Field(16.0, gt=0)
    lr: float = Field(1e-3, gt=0)


class DigitsTask(StrictModel):
    """scikit-learn's digits, a 64-h-h-10 ReLU MLP trained in float, every Linear quantised (g=16)."""
    hidden: PositiveInt = 128
    epochs: PositiveInt = 60
    batch_size: PositiveInt = 64
    lr: float = Field(3e-3, gt=0)
    test_fraction: float = Field(0.3, gt=0, lt=1)
    group_size: PositiveInt = 16
    target_modules: list[str] = Field(default_factory=lambda: ["0", "2", "4"], min_length=1)
    steps: PositiveInt = 300  # recovery budget, on the training split (spec §e)


class LMTask(StrictModel):
    """The shared causal LM (None: the lm-base stage's data/lm_base; else a local transformers
    causal-LM folder), quantised on its block projections, recovered on the corpus's training split
    and scored on held-out (validation) text."""
    model_dir: ProjectPath | None = None
    corpus_dir: ProjectPath = "data/text/shakespeare"
    # a model folder with its own tokenizer.json reads this slice in its vocabulary instead (pipeline.lm_tokens)
    source_text: ProjectPath = "data/raw/shakespeare"
    val_fraction: float = Field(0.15, gt=0, lt=1)  # of source_text's documents, held out (the text-corpus share)
    block_size: PositiveInt = 128
    batch_size: PositiveInt = 16
    steps: PositiveInt = 100
    group_size: PositiveInt = 32
    target_modules: list[str] = Field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj",
                                                               "gate_proj", "up_proj", "down_proj"], min_length=1)
    eval_windows: PositiveInt = 64
    calibration_windows: PositiveInt = 32  # GPTQ's calibration data: training windows


class LotaQafConfig(MethodConfig):
    """`seeds` (MethodConfig's): each recovery's seeds (the adapter's initialisation and batches),
    from the one quantised model; `seed` splits the digits and initialises and trains the float MLP."""

    tasks: list[TaskName] = Field(default_factory=lambda: list(TASKS), min_length=1)
    bits: list[int] = Field(default_factory=lambda: [4, 3, 2], min_length=1)
    quantizer: Literal["rtn", "gptq"] = "gptq"
    gptq_damp: float = Field(0.01, gt=0)
    methods: list[MethodName] = Field(default_factory=lambda: list(METHODS), min_length=1)
    lota: LotaSettings = LotaSettings()
    lora: AdapterSettings = AdapterSettings()
    qalora: AdapterSettings = AdapterSettings()
    digits: DigitsTask = DigitsTask()
    lm: LMTask = LMTask()
    threads: PositiveInt = 2

    @field_validator("bits")
    @classmethod
    def _bit_widths(cls, bits: list[int]) -> list[int]:
        bad = [b for b in bits if b not in BIT_WIDTHS]
        if bad:
            raise ValueError(f"bit width {bad[0]} is not one of {', '.join(map(str, BIT_WIDTHS))}")
        return bits
