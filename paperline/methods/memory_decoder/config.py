"""Parameters of the Memory Decoder pipeline: two base LM shapes pretrained on the general corpus,
the domain corpus (generated long-tail facts, or a UTF-8 text file by path), the kNN-LM datastore
(exact IndexFlatL2 or IVF-PQ), the kNN targets (k, temperature), the MemDec training (α, budget)
and the λ sweep of the evaluation."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from paperline.config import LMShapeConfig, LMTrainConfig, MethodConfig, ProjectPath, StrictModel

PositiveInt = Annotated[int, Field(ge=1)]


ShapeConfig = LMShapeConfig  # the bases' and the MemDec's shapes: the shared small-LM shape


TrainConfig = LMTrainConfig  # the base LMs' budget: the shared LM training parameters


class DomainConfig(StrictModel):
    """Generated facts by default (spec §e: 'entity_i rel_j → value_ij' in varied contexts), or
    `text`: a UTF-8 domain text file (relative to the project root), tokenized with the general
    corpus's tokenizer and split by `val_fraction` (the last part is held out)."""

    text: ProjectPath | None = None
    val_fraction: float = Field(0.1, gt=0, lt=1)
    entities: PositiveInt = 60
    relations: PositiveInt = 4
    train_repeats: PositiveInt = 6  # times each fact appears in the training text, in random contexts
    val_repeats: PositiveInt = 1
    seed: int = 0


class DatastoreConfig(StrictModel):
    index: Literal["flat", "ivfpq"] = "flat"
    nlist: PositiveInt = 4096  # IVF centroids (the paper's 4096)
    code_size: PositiveInt = 64  # PQ sub-quantizers = bytes per code at 8 bits (the paper's 64)
    nbits: PositiveInt = 8
    nprobe: PositiveInt = 32
    train_keys: PositiveInt = 1_000_000  # keys sampled to train the IVF-PQ quantizers


class KnnConfig(StrictModel):
    k: PositiveInt = 32
    temperature: float = Field(16.0, gt=0)  # softmax(−d/τ) over squared-L2 distances d


class MemDecTrainConfig(TrainConfig):
    alpha: float = Field(0.5, ge=0, le=1)  # weight of KL(p_kNN ‖ p_MemDec); 1 − α on CE
    init_from_small_base: bool = True  # spec §e: MemDec = a copy of the small base LM


class MemoryDecoderConfig(MethodConfig):
    general_corpus_dir: ProjectPath = "data/text/shakespeare"
    block_size: PositiveInt = 64
    base_small: ShapeConfig = ShapeConfig()
    base_large: ShapeConfig = ShapeConfig(hidden_size=128, num_layers=4, num_heads=4, head_dim=32)
    memdec: ShapeConfig = ShapeConfig()  # the MemDec's shape (equal to base_small when copied from it)
    base_train: TrainConfig = TrainConfig()
    memdec_train: MemDecTrainConfig = MemDecTrainConfig()
    domain: DomainConfig = DomainConfig()
    datastore: DatastoreConfig = DatastoreConfig()
    knn: KnnConfig = KnnConfig()
    lambdas: list[Annotated[float, Field(ge=0, lt=1)]] = Field(default=[0.0, 0.1, 0.25, 0.4, 0.55, 0.7, 0.85],
                                                                min_length=1)
    eval_windows: PositiveInt = 64  # evaluation windows (block_size) per split
    timing_windows: PositiveInt = 8  # windows timed per variant for the per-token inference cost
    threads: PositiveInt = 1
    # `seeds` (MethodConfig's): the MemDec trains once per seed (its batch order; its init too when not copied from the small
    # base) and every seed's MemDec is scored; the bases and the datastore are built once, at
    # `seed`: the paper plugs one MemDec into given pretrained bases, so the MemDec is what varies

    @model_validator(mode="after")
    def _consistent(self):
        if self.memdec_train.init_from_small_base and self.memdec != self.base_small:
            raise ValueError("memdec: shape must equal base_small when memdec_train.init_from_small_base")
        if 0.0 not in self.lambdas:
            raise ValueError("lambdas: must include 0.0 (the base LM alone)")
        return self
