"""Parameters of Influence Distillation (spec §b pipeline, §e small-scale reproduction).

The pool and target sets come from the `tulu-pool` stage (`pool_dir`, Tulu V2 JSONL). The model is
the shared `paperline.nn.causal_lm.CausalLM` shaped as a small LLaMA (`llama_config`) with a
byte-level tokenizer (`model: llama`), the shared Shakespeare-pretrained LM with its byte-level BPE
(`model: lm_base`, the lm-base stage's model: a pretrained start at this scale, issue 25), or any
transformers causal LM by local path (`model: hf`, the paper profile)."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from paperline.config import MethodConfig, ProjectPath, StrictModel

PositiveInt = Annotated[int, Field(ge=1)]
PositiveFloat = Annotated[float, Field(gt=0)]
SelectionMethod = Literal["random", "rds_plus", "exact_first_order", "influence_distillation"]


class SmallLlama(StrictModel):
    hidden_size: PositiveInt = 64
    intermediate_size: PositiveInt = 128
    num_heads: PositiveInt = 4
    num_layers: PositiveInt = 2


class QPCheckConfig(StrictModel):
    """Spec §e convex check: logistic regression, the full second-order QP against first order."""

    n_source: PositiveInt = 40
    n_target: PositiveInt = 20
    dim: PositiveInt = 5
    k: PositiveInt = 10  # non-zero weights (λ found by binary search on the first-order problem)
    lrs: list[PositiveFloat] = Field(default=[1e-3, 1e-2, 1e-1, 1.0, 10.0], min_length=1)


class InfluenceDistillationConfig(MethodConfig):
    pool_dir: ProjectPath = "data/tulu"  # written by the tulu-pool stage
    model: Literal["llama", "lm_base", "hf"] = "llama"
    llama: SmallLlama = SmallLlama()
    hf_model_path: ProjectPath | None = None  # model: hf — a local folder AutoModelForCausalLM reads
    # model: lm_base — the lm-base stage's folder and the tokenizer it was trained with (the
    # text-corpus stage's BPE; `</s>` and a pad are appended after its vocabulary)
    lm_base_path: ProjectPath = "data/lm_base"
    lm_base_tokenizer: ProjectPath = "data/text/shakespeare/tokenizer.json"
    max_length: PositiveInt = 256  # tokens per sample after the Tulu template
    dtype: Literal["float32", "bfloat16"] = "float32"
    # ---- warm-up (spec §b.1): AdamW on a random subset; its moments are kept for the Adam influence
    warmup_samples: PositiveInt = 300
    warmup_steps: PositiveInt = 100
    lr: PositiveFloat = 3e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: PositiveFloat = 1e-8
    weight_decay: float = Field(0.0, ge=0)
    batch_size: PositiveInt = 16
    micro_batch_size: PositiveInt | None = None  # rows per forward/backward within a step (accumulated)
    # ---- JVP embeddings (spec §b.2)
    jvp_blocks: PositiveInt = 1  # the first blocks of the model (the official code: 4)
    jvp_tangents: PositiveInt = 2
    # Rademacher projection of the concatenated JVPs (the official default 4,096, applied even when
    # tangents·hidden is narrower, as at our d = 64: a near-isometry, cheap at 5k samples); 0: none
    jvp_proj_dim: int = Field(4096, ge=0)
    # ---- landmarks and gradients (spec §b.3)
    num_landmarks: PositiveInt = 128
    # landmark counts of the propagation-fidelity curve (the paper's 512–16,384 ablation, at our scale);
    # their influence is read off the exact reference, so the curve costs no gradients
    landmark_curve: list[PositiveInt] = Field(default=[16, 32, 64, 128, 256, 512, 1024])
    grad_proj_dim: PositiveInt = 4096  # randomised Hadamard projection of the down_proj gradients
    grad_max_elements: PositiveInt | None = None  # random mask of the gradient coordinates (official: 1e9)
    adam_aware: bool = True  # p_i = <a ⊙ g_i, g_T> (False: plain gradients)
    # ---- propagation (spec §b.4)
    kernel_damp: PositiveFloat = 1e-2  # relative to the mean diagonal of K_LL
    bandwidth_samples: PositiveInt = 1000
    # ---- selection and fine-tuning (spec §b.5, §e)
    select_k: PositiveInt = 500
    methods: list[SelectionMethod] = Field(
        default=["random", "rds_plus", "exact_first_order", "influence_distillation"], min_length=1)
    finetune_epochs: PositiveInt = 1
    finetune_lr: PositiveFloat = 1e-3
    eval_batch_size: PositiveInt = 32
    grad_chunk: PositiveInt = 32  # samples per vmap call (memory)
    threads: PositiveInt = 1  # torch threads of a fine-tuning task (CPU; they run one after another)
    # `seeds` (MethodConfig's), the fine-tuning seeds (empty: [seed]): each seed fine-tunes every selection again in another
    # batch order and draws the random selection again (`seed + 3`, the tulu-select stage's draw at
    # `seed`); the warm-up and the targeted selections are the stage's, made once at `seed`
    qp: QPCheckConfig = QPCheckConfig()

    @model_validator(mode="after")
    def _consistent(self) -> "InfluenceDistillationConfig":
        if self.model == "hf" and not self.hf_model_path:
            raise ValueError("model hf needs hf_model_path (a local folder; nothing is downloaded)")
        if self.model == "llama" and self.jvp_blocks > self.llama.num_layers:
            raise ValueError(f"jvp_blocks {self.jvp_blocks} exceeds llama.num_layers {self.llama.num_layers}")
        if self.model == "llama" and self.llama.hidden_size % self.llama.num_heads:
            raise ValueError("llama.hidden_size must be a multiple of llama.num_heads")
        if self.qp.k >= self.qp.n_source:
            raise ValueError(f"qp.k {self.qp.k} must be below qp.n_source {self.qp.n_source}")
        if "influence_distillation" not in self.methods:
            raise ValueError("methods must include influence_distillation")
        return self
