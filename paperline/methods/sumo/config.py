"""Parameters of the SUMO experiments: the Newton–Schulz-vs-SVD theory check (spec §e.1) and the
optimizer comparison (§e.2) on one of two tasks:

- ``digits_mlp``: an MLP on scikit-learn's real 8×8 digits (tiny and smoke: CPU, offline);
- ``llama_c4``: LLaMA pretraining on C4 under the GaLore protocol (paper: GPU, C4 and a tokenizer
  on disk, the ``lm`` block).

The ``text_lm`` block adds a second, small training task beside the first: the shared causal LM
pretrained from scratch on the committed Shakespeare tokens with every optimizer of its own list
over its own 3-point lr grids (the sweep and best-lr logic are the digits task's), logging the
condition numbers of the moments SUMO orthogonalises. `steps`, `rank`, `update_period`, `alpha`, the lr grid and the
  schedule mean the same on both; `batch_size` is sequences per optimizer step (GaLore's
  total_batch_size) there."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from paperline.config import MethodConfig, ProjectPath, StrictModel

PositiveInt = Annotated[int, Field(ge=1)]
PositiveFloat = Annotated[float, Field(gt=0)]
OptimizerName = Literal["adamw", "galore_adamw", "muon", "sumo", "sumo_ns"]
DIGITS_FEATURES = 64  # 8×8 pixels: the input width, so the first weight matrix is hidden×64

# GaLore's configs/llama_{60m,130m,350m,1b}.json, as `paperline.nn.causal_lm.llama_config` arguments
# (vocabulary 32,000: the T5 tokenizer's); "tiny" is ours, for tests
LLAMA_SIZES: dict[str, dict[str, int]] = {
    "tiny": dict(hidden_size=32, intermediate_size=64, num_heads=2, num_layers=2, vocab_size=512,
                 max_position_embeddings=128),
    "60m": dict(hidden_size=512, intermediate_size=1376, num_heads=8, num_layers=8, vocab_size=32000,
                max_position_embeddings=1024),
    "130m": dict(hidden_size=768, intermediate_size=2048, num_heads=12, num_layers=12, vocab_size=32000,
                 max_position_embeddings=1024),
    "350m": dict(hidden_size=1024, intermediate_size=2736, num_heads=16, num_layers=24, vocab_size=32000,
                 max_position_embeddings=1024),
    "1b": dict(hidden_size=2048, intermediate_size=5461, num_heads=32, num_layers=24, vocab_size=32000,
               max_position_embeddings=1024),
}


class LlamaC4Config(StrictModel):
    """GaLore's C4 protocol (torchrun_main.py and scripts/benchmark_c4/*.sh)."""

    model_size: Literal["tiny", "60m", "130m", "350m", "1b"]  # LLAMA_SIZES
    c4_dir: ProjectPath  # folder of c4-train.*.json.gz and c4-validation.*.json.gz shards
    tokenizer: ProjectPath  # a tokenizer.json (GaLore: t5-base's)
    pad_token: str = "<pad>"
    vocab_size: PositiveInt | None = None  # default: the model size's (32,000)
    max_length: PositiveInt = 256
    micro_batch_size: PositiveInt = 64  # sequences per forward pass; batch_size / this = accumulation
    dtype: Literal["bfloat16", "float32"] = "bfloat16"  # GaLore trains the whole model in bf16
    eval_every: PositiveInt = 1000
    eval_tokens: PositiveInt = 10_000_000
    shuffle_seed: int = 42
    shuffle_buffer: PositiveInt = 10_000


class TextLMConfig(StrictModel):
    """The shared CausalLM (`paperline.nn.causal_lm`, T6 defaults: tied embedding, no norm gains)
    trained from scratch on a prepared text corpus, each optimizer × lr at equal steps. The fields
    it shares with the digits task (alpha, momenta, limiter, weight decay, schedule, seed) are the
    method's; these are the ones that differ at this scale."""

    corpus: ProjectPath = "data/text/shakespeare"  # a text-corpus stage output (load_corpus)
    hidden_size: PositiveInt = 64
    num_layers: PositiveInt = 2
    num_heads: PositiveInt = 4
    block_size: PositiveInt = 64
    batch_size: PositiveInt = 16
    steps: PositiveInt = 200
    optimizers: list[OptimizerName] = Field(default=["adamw", "galore_adamw", "muon", "sumo"], min_length=1)
    lr_grid: dict[OptimizerName, list[PositiveFloat]]
    # seeds (each a run's index in its generator's seed, train.run_seed): the lr grid runs at the
    # first, 0 (where the best lr is picked: summary.tuning_runs); each optimizer's best lr at the others too
    seeds: list[int] = Field([0], min_length=1)
    rank: PositiveInt = 16
    update_period: PositiveInt = 50
    adamw_part_lr: PositiveFloat | None = 3e-3  # embeddings and norms under GaLore, Muon, SUMO
    log_every: PositiveInt = 5
    eval_every: PositiveInt = 100
    eval_windows: PositiveInt = 64
    condition_every: PositiveInt = 10  # k: SUMO's moment condition numbers sampled every k steps

    @model_validator(mode="after")
    def _consistent(self) -> "TextLMConfig":
        missing = [name for name in self.optimizers if not self.lr_grid.get(name)]
        if missing:
            raise ValueError(f"text_lm.lr_grid has no learning rates for {missing}")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"text_lm.hidden_size {self.hidden_size} is not a multiple of num_heads {self.num_heads}")
        if self.rank > self.hidden_size:
            raise ValueError(f"text_lm.rank {self.rank} is larger than hidden_size {self.hidden_size} "
                             "(the smaller side of every projection)")
        if self.condition_every % self.log_every:
            raise ValueError(f"text_lm.condition_every {self.condition_every} must be a multiple of "
                             f"log_every {self.log_every} (the samples are taken at log steps)")
        if self.seeds[0] != 0 or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"text_lm.seeds {self.seeds}: distinct, the first 0 (the lr grid's seed)")
        return self


class SumoConfig(MethodConfig):
    task: Literal["digits_mlp", "llama_c4"] = "digits_mlp"
    lm: LlamaC4Config | None = None
    text_lm: TextLMConfig | None = None  # the second smoke task: a causal LM on the committed corpus
    # ---- theory (spec §e.1): r×n moments with prescribed singular values at each κ
    condition_numbers: list[Annotated[float, Field(ge=1)]] = Field(
        default=[1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6], min_length=1)
    theory_rank: PositiveInt = 16  # r rows of the moment
    theory_cols: PositiveInt = 256  # n columns
    theory_draws: PositiveInt = 20  # random (U, V) per κ
    ns_steps: list[PositiveInt] = Field(default=[5], min_length=1)  # NS iterations compared (5: Muon's)

    # ---- training (spec §e.2): every optimizer × every lr of its grid × `seeds` (MethodConfig's:
    # each a run's index in its generator's seed, train.run_seed), equal steps
    optimizers: list[OptimizerName] = Field(
        default=["adamw", "galore_adamw", "muon", "sumo", "sumo_ns"], min_length=1)
    lr_grid: dict[OptimizerName, list[PositiveFloat]]  # the lr sweep of each optimizer
    steps: PositiveInt = 600
    batch_size: PositiveInt = 64
    hidden_sizes: list[PositiveInt] = Field(default=[256, 256], min_length=1)
    test_fraction: float = Field(0.2, gt=0, lt=1)
    split_seed: int = 0  # one train/test split for every run
    # the low-rank methods (spec: GaLore r=8/16, T=50, α=0.25; SUMO same r, K=50)
    rank: PositiveInt = 8
    update_period: PositiveInt = 50  # GaLore's T, SUMO's K
    alpha: PositiveFloat = 0.25
    sumo_momentum: float = Field(0.9, ge=0, lt=1)  # μ
    muon_momentum: float = Field(0.95, ge=0, lt=1)
    limiter: float | None = Field(1.1, gt=1)  # SUMO's γ; null: no limiter
    weight_decay: float = Field(0.0, ge=0)
    # lr of the parameters the matrix methods hand to AdamW (biases, the head) under GaLore, Muon
    # and SUMO; null: the method's own lr (the GaLore protocol). The AdamW baseline trains everything
    # at its swept lr
    adamw_part_lr: PositiveFloat | None = 1e-3
    # the GaLore protocol's schedule: linear warm-up, then cosine decay to min_lr_ratio·lr
    lr_schedule: Literal["constant", "cosine"] = "cosine"
    warmup_fraction: float = Field(0.1, ge=0, lt=1)
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    log_every: PositiveInt = 20
    checkpoint_every: PositiveInt = 200
    # ---- step time (measured in the same run, round-robin over the optimizers)
    timing_rounds: PositiveInt = 5
    timing_steps: PositiveInt = 20

    @model_validator(mode="after")
    def _consistent(self) -> "SumoConfig":
        missing = [name for name in self.optimizers if not self.lr_grid.get(name)]
        if missing:
            raise ValueError(f"lr_grid has no learning rates for {missing}")
        if "adamw" not in self.optimizers:
            raise ValueError("optimizers must include adamw: step time and state memory are reported against it")
        if self.task == "digits_mlp":
            smallest = min([DIGITS_FEATURES, *self.hidden_sizes])
            if self.rank > smallest:
                raise ValueError(f"rank {self.rank} is larger than the smallest weight matrix side "
                                 f"({smallest}: min of the 64 input features and hidden_sizes)")
        else:
            if self.lm is None:
                raise ValueError("task llama_c4 needs the lm block (model_size, c4_dir, tokenizer)")
            size = LLAMA_SIZES[self.lm.model_size]
            if self.rank > size["hidden_size"]:
                raise ValueError(f"rank {self.rank} is larger than LLaMA-{self.lm.model_size}'s hidden size "
                                 f"{size['hidden_size']} (the smaller side of its projections)")
            if self.batch_size % self.lm.micro_batch_size:
                raise ValueError(f"batch_size {self.batch_size} is not a multiple of lm.micro_batch_size "
                                 f"{self.lm.micro_batch_size}")
            if self.lm.max_length > size["max_position_embeddings"]:
                raise ValueError(f"lm.max_length {self.lm.max_length} exceeds the model's "
                                 f"{size['max_position_embeddings']}")
        if self.theory_rank > self.theory_cols:
            raise ValueError(f"theory_rank {self.theory_rank} must be ≤ theory_cols {self.theory_cols}")
        return self
