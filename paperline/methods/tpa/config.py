"""Parameters of the TPA comparison: the model shape (shared by the six attention variants, h
rebalanced per variant), the training budget (the same for every variant), the data (the prepared
Shakespeare corpus, or nanoGPT-format token files of a real corpus such as a tokenized
FineWeb-Edu shard), and the decode-time measurement."""
from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from paperline.config import LMTrainConfig, MethodConfig, ProjectPath, StrictModel
from paperline.methods.tpa.formulas import ShapeConfig, Variant

PositiveInt = Annotated[int, Field(ge=1)]


class TrainConfig(LMTrainConfig):  # spec §e's budget as defaults, plus the context length
    steps: PositiveInt = 400
    batch_size: PositiveInt = 32
    block_size: PositiveInt = 128
    warmup_steps: int = Field(20, ge=0)
    eval_windows: PositiveInt = 64


class DataConfig(StrictModel):
    """`corpus_dir`: a folder the text-corpus stage wrote (relative to the project root). Or a real
    corpus as nanoGPT token files: `train_bin` + `val_bin` + `vocab_size` (e.g. FineWeb-Edu with
    GPT-2's tokenizer: 50304, the T6 configs' padded vocabulary)."""

    corpus_dir: ProjectPath = "data/text/shakespeare"
    train_bin: ProjectPath | None = None
    val_bin: ProjectPath | None = None
    vocab_size: PositiveInt | None = None

    @model_validator(mode="after")
    def _token_files_together(self):
        given = [self.train_bin is not None, self.val_bin is not None, self.vocab_size is not None]
        if any(given) and not all(given):
            raise ValueError("data: train_bin, val_bin and vocab_size go together (nanoGPT token files)")
        return self


class TPAConfig(MethodConfig):
    variants: list[Variant] = Field(default=["mha", "mqa", "gqa", "mla", "tpa", "tpa_kvonly"], min_length=1)
    # `seeds` (MethodConfig's): every variant trains once per seed (init and batch order; the same seed gives every variant
    # the same batches) and its row is the mean: the claims need the seeds' spread
    shape: ShapeConfig = ShapeConfig()
    train: TrainConfig = TrainConfig()
    # a dict, not DataConfig(): the default is validated (with the project root) like a given section,
    # where a default instance would keep its relative corpus_dir
    data: DataConfig = Field(default_factory=dict)  # type: ignore[assignment]  # validated into a DataConfig
    threads: PositiveInt = 1  # torch threads per training task (CPU)
    decode_contexts: list[PositiveInt] = Field(default=[128, 512, 2048], min_length=1)
    decode_tokens: PositiveInt = 16  # single-token decode steps timed per context length
    decode_repeats: PositiveInt = 3  # best of, per (variant, context)


    @model_validator(mode="after")
    def _fits(self):
        if self.train.min_lr > self.train.lr:
            raise ValueError(f"train.min_lr {self.train.min_lr} exceeds train.lr {self.train.lr}")
        if self.train.warmup_steps >= self.train.steps:
            raise ValueError(f"train.warmup_steps {self.train.warmup_steps} ≥ train.steps {self.train.steps}")
        return self
