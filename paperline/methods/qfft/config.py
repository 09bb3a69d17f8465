"""Parameters of the QFFT pipeline: the problems (generated chain sums, or S1K/LIMO-style JSONL
by path), the short-CoT base model (a char-level CausalLM trained here, or an HF model by path),
the long-CoT teacher's slip rate, one fine-tuning budget shared by every variant (SFT, QFFT and
their noise-level-IV runs: same steps, same learning rate), and the decoding of the evaluation."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from paperline.config import LMShapeConfig, LMTrainConfig, MethodConfig, ProjectPath, StrictModel

PositiveInt = Annotated[int, Field(ge=1)]


class ProblemsConfig(StrictModel):
    """reasoning-gym `chain_sum` problems: the base model's training set, the fine-tuning set
    (the S1K stand-in, answered by the long-CoT teacher) and the evaluation set, disjoint seeds."""

    base_train: PositiveInt = 4000
    finetune: PositiveInt = 1000
    eval: PositiveInt = 300
    min_terms: int = Field(2, ge=2)
    max_terms: int = Field(4, ge=2)
    max_digits: PositiveInt = 2
    slip_rate: float = Field(0.5, ge=0, le=1)  # share of teacher first passes with an injected slip
    # the fine-tuning responses' first pass: "teacher" a template pass (a slip at slip_rate), or
    # "base" the base model's own greedy short-CoT answer to the question, followed by
    # "Wait, recheck:" only where it is wrong (written after the base is trained)
    first_pass: Literal["teacher", "base"] = "teacher"
    seed: int = 0

    @model_validator(mode="after")
    def _terms(self):
        if self.max_terms < self.min_terms:
            raise ValueError(f"max_terms {self.max_terms} < min_terms {self.min_terms}")
        return self


class RealDataConfig(StrictModel):
    """Paper profile: fine-tuning responses from an S1K/LIMO JSONL, evaluation questions from
    another (question + answer fields), relative to the project root or absolute."""

    finetune_jsonl: ProjectPath
    finetune_format: Literal["limo", "s1k", "alpaca"] = "limo"
    eval_jsonl: ProjectPath
    eval_format: Literal["limo", "s1k", "alpaca"] = "limo"


class LoraConfig(StrictModel):
    """Parameter-efficient fine-tuning through peft: LoRA of rank `rank` (scale alpha/rank) on the
    linear layers named `target_modules` (a module name or its last dotted part), the base frozen."""

    rank: PositiveInt = 4
    alpha: float = Field(8.0, gt=0)
    target_modules: list[str] = Field(default=["q_proj", "v_proj"], min_length=1)
    dropout: float = Field(0.0, ge=0, lt=1)


class FinetuneConfig(LMTrainConfig):
    lora: LoraConfig | None = None  # None: full fine-tuning (the paper's)
    epochs: float | None = Field(None, gt=0)  # set: steps = ceil(epochs · examples / batch_size) (paper: 6)
    warmup_ratio: float | None = Field(None, ge=0, lt=1)  # set: warmup_steps = ⌈ratio · steps⌉ (paper: 0.1)
    # set: AdamW's beta2 (paper: 0.999, the HF Trainer's default that LLaMA-Factory's yaml keeps);
    # None: the shared loop's 0.95
    adam_beta2: float | None = Field(None, gt=0, lt=1)


class DecodeConfig(StrictModel):
    max_new_tokens: PositiveInt = 160
    temperature: float = Field(0.0, ge=0)  # 0: greedy (smoke); the paper samples at 0.6
    samples: PositiveInt = 1  # responses per question (paper: 16), RAK averaged over them
    batch_size: PositiveInt = 256
    chat_template: bool = False  # prompt through the tokenizer's chat template + the paper's system prompt


class QFFTConfig(MethodConfig):
    problems: ProblemsConfig = ProblemsConfig()
    real_data: RealDataConfig | None = None
    base_model_path: ProjectPath | None = None  # an HF causal LM directory (paper: Qwen2.5-7B-Instruct); None: train one
    base: LMShapeConfig = LMShapeConfig()
    # where the trained base starts (issue 25's "more robust base" lever): "scratch" a fresh
    # char-level CausalLM of `base`'s shape; "lm_base" the shared Shakespeare-pretrained LM at
    # `lm_base_path` (its own shape: `base` is not read), read through its corpus's byte-level BPE
    # (`lm_base_tokenizer`) with <pad>, <bos>, <eos> appended (the embedding grows by three rows),
    # then trained on the terse solutions like a fresh one
    base_init: Literal["scratch", "lm_base"] = "scratch"
    lm_base_path: ProjectPath = "data/lm_base"
    lm_base_tokenizer: ProjectPath = "data/text/shakespeare/tokenizer.json"
    base_train: LMTrainConfig = LMTrainConfig()
    finetune: FinetuneConfig = FinetuneConfig()
    cutoff: PositiveInt = 160  # tokens per training sequence (paper: 16384)
    decode: DecodeConfig = DecodeConfig()
    # how QFFT's question-free examples end (data.QFFT_ENDS): "none" the official `qwen_qfft`
    # template's (the response alone, no end token trained: the model stops where its base would,
    # or at decode.max_new_tokens); "eos" ours before issue 44 (<eos> appended and trained)
    qfft_end: Literal["none", "eos"] = "none"
    noise_seed: int = 1
    threads: PositiveInt = 1
    # `seeds` (MethodConfig's), the training seeds: each one trains its own base and four fine-tunes
    # (weights' init, batch order, sampling draws) on the same problems (problems.seed); the rows
    # are means over them. Empty: `seed` alone. One seed of this loop is not a claim (issue 25:
    # another machine moved the base's accuracy from 0.647 to 0.730 on the same seed)

    @model_validator(mode="after")
    def _sources(self):
        if self.base_init == "lm_base" and self.base_model_path is not None:
            raise ValueError("base_init: 'lm_base' trains a base from the shared LM; base_model_path is a base "
                             "used as it is (set one of them)")
        if self.real_data is not None and self.base_model_path is None:
            raise ValueError("real_data: needs base_model_path (an HF model whose tokenizer reads the text)")
        if self.real_data is not None and self.problems.first_pass == "base":
            raise ValueError("problems.first_pass: 'base' builds generated chain-sum responses; real_data brings its own")
        return self
