"""Parameters of the LEFF run: the base LM and corpus, the non-IID clients, the federated rounds,
LEFF's block choice and context distillation, and the baselines' settings."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from paperline.config import MethodConfig, ProjectPath

PositiveInt = Annotated[int, Field(ge=1)]
# Every method trains the classification head with its part of the body. fedhead: the head alone
# on the frozen pretrained model (the trivial baseline); fedavg: full fine-tuning; fedlora: peft
# LoRA on q/k/v/o; slora: SLoRA (Babakniya et al. 2023: a sparse stage, then LoRA started from its
# update's SVD); fedbitfit: zero-started biases on every block Linear (the base LM has none);
# leff_*: LEFF with its block choice by importance, at random, or round-robin
Method = Literal["fedhead", "fedavg", "fedlora", "slora", "fedbitfit", "leff_importance", "leff_random",
                 "leff_round_robin"]
LEFF_METHODS = ("leff_importance", "leff_random", "leff_round_robin")


class LEFFConfig(MethodConfig):
    model: ProjectPath = "data/lm_base"  # a transformers causal-LM folder (paperline CausalLM, GQA-family attention)
    corpus: ProjectPath = "data/text/shakespeare"
    # the downstream task, play attribution: the text the corpus was cut from (its documents
    # `speeches_per_document` speeches each, as params/text_corpus.yaml cut them), each window
    # labelled by its play; train from the corpus's training documents, test from its held-out ones
    task_text: ProjectPath = "data/raw/shakespeare"
    speeches_per_document: PositiveInt = 6
    # the server's public proxy set (importance, context distillation): another domain than the
    # clients' and the test set's, *.txt hash-checked by SHA256SUMS, encoded with the corpus's
    # tokenizer (the paper: WebNLG, a public set apart from the task's); the committed King James slice
    proxy_text: ProjectPath = "data/raw/kjv"
    block_size: PositiveInt = 64
    methods: list[Method] = Field(default=["fedhead", "fedavg", "fedlora", "slora", "fedbitfit", "leff_importance",
                                           "leff_random", "leff_round_robin"], min_length=1)
    baseline: Method = "fedavg"
    # non-IID clients: each play's training windows shared among the clients by Dirichlet(α) (label skew)
    clients: Annotated[int, Field(ge=2)] = 8
    alphas: list[Annotated[float, Field(gt=0)]] = Field(default=[0.1], min_length=1)
    # the methods run at the α after the first (None: every method): a second α for FedAvg against
    # LEFF only keeps the smoke run within its budget (each method's run costs ~20 s on 2 cores)
    later_alpha_methods: list[Method] | None = None
    # `seeds` (MethodConfig's): the seeds every (method, α) runs with (client shards, batch order,
    # block draws, distillation batches, LoRA init); empty: `seed` alone. The claims pair the
    # methods seed by seed.
    capacities: list[PositiveInt] = Field(default=[1, 2, 3], min_length=1)  # L_i, cycled over the clients
    # each client's compute rate (GFLOP/s), cycled over the clients like `capacities` (so a list
    # of the same length pairs a rate with a capacity): a round's simulated time is the slowest
    # participating client's measured FLOPs / its rate, the straggler every method waits for
    client_rates: list[Annotated[float, Field(gt=0)]] = Field(default=[1.0], min_length=1)
    rounds: PositiveInt = 10
    local_steps: PositiveInt = 8  # AdamW steps per client per round, batches drawn with replacement (no `local_epochs`)
    # the paper's local work: this many passes over the client's shard per round, each in a fresh
    # seeded order, ⌈shard windows / batch_size⌉ steps a pass (a client's work grows with its data);
    # None: `local_steps` for every client whatever its shard
    local_epochs: PositiveInt | None = None
    # each client keeps this seeded share of its shard's windows (at least one): with `local_epochs`,
    # the smoke's local work within its step budget; 1: the whole shard
    shard_fraction: float = Field(1.0, gt=0, le=1)
    batch_size: PositiveInt = 8
    lr: float = Field(1e-3, gt=0)  # the body's; the paper's 1e-5 is for DeBERTa/GPT-2; our LM is far smaller
    # the body lrs every method that trains the body is tuned over (issue 41): at the first α and
    # seed each runs once per rate, the one with the lowest validation loss is kept (fed.validation_rank)
    # and every other seed and α runs at it; None: `lr` for every method, no tuning run
    lr_grid: list[Annotated[float, Field(gt=0)]] | None = Field(None, min_length=1)
    # where a method's chosen rate is the lowest or highest tried, up to this many more tuning runs,
    # each one step past that edge (the grid's own step there: paperline.sweep.sweep), the same
    # rule for every method
    lr_sweep_extend: Annotated[int, Field(ge=0)] = 0
    # labelled training windows held out from the clients, spread over the plays: the lr choice's score
    val_windows: PositiveInt = 128
    # the zero-started classification head's, the same for every method (a fresh head needs a far
    # larger step than the pretrained body)
    head_lr: float = Field(1e-2, gt=0)
    # LEFF's server side
    compression: float = Field(0.5, gt=0, le=1)  # r: a context of n layers is distilled into ⌈n·r⌉
    distill_steps: Annotated[int, Field(ge=0)] = 50
    distill_lr: float = Field(1e-3, gt=0)
    attention_kl_weight: float = Field(1.0, ge=0)  # α of E = MSE(H_s, H_t) + α·KL(A_t‖A_s)
    proxy_windows: PositiveInt = 32  # public proxy set: unlabeled windows spread over `proxy_text`
    eval_windows: PositiveInt = 256  # the global test windows, spread over the task's held-out windows
    # baselines
    lora_rank: PositiveInt = 4
    lora_alpha: float = Field(8.0, gt=0)
    # SLoRA's first stage: the first `slora_sparse_rounds` rounds train a fixed random `slora_density`
    # share of each LoRA target weight's entries (the paper's ~1% density), FedAvg on those entries;
    # then LoRA (lora_rank, lora_alpha) starts from the truncated SVD of that stage's update
    slora_density: float = Field(0.01, gt=0, le=1)
    slora_sparse_rounds: PositiveInt = 1
    # Flower simulation
    client_cpus: PositiveInt = 1  # Ray resources per ClientApp: clients run this many-way parallel per core count
    round_timeout_s: float = Field(600.0, gt=0)
    # fault check: this client fails in this round of every method's run at the last seed (None: no
    # fault), or of `fail_method`'s run only, by raising in its ClientApp or by killing the process the ClientApp
    # runs in. A kill takes a Ray actor of Flower's pool with it, and a later run's client can be
    # sent to that dead actor (measured: ActorDiedError for the surviving client, a run without
    # any client): kill in the last method's run, where nothing runs after it.
    fail_client: Annotated[int, Field(ge=0)] | None = None
    fail_round: PositiveInt = 2
    fail_mode: Literal["raise", "kill"] = "raise"
    fail_method: str | None = None

    def faulty(self, method: str) -> bool:
        """Whether `method`'s run at this config's `seed` is the fault check's (the last seed's only:
        a killed client's Ray actor is lost to every run after it)."""
        return (self.fail_client is not None and self.fail_method in (None, method)
                and self.seed == self.run_seeds()[-1])

    @model_validator(mode="after")
    def _check(self) -> "LEFFConfig":
        if self.fail_client is not None and self.fail_client >= self.clients:
            raise ValueError(f"fail_client {self.fail_client}: there are only {self.clients} clients")
        if self.fail_client is not None and self.fail_round > self.rounds:
            raise ValueError(f"fail_round {self.fail_round} is after the last round {self.rounds}")
        if self.later_alpha_methods is not None and (extra := set(self.later_alpha_methods) - set(self.methods)):
            raise ValueError(f"later_alpha_methods {sorted(extra)} are not in methods {self.methods}")
        if len(set(self.alphas)) != len(self.alphas):
            raise ValueError(f"alphas {self.alphas} repeat a value")
        if self.lr_grid is not None and len(set(self.lr_grid)) != len(self.lr_grid):
            raise ValueError(f"lr_grid {self.lr_grid} repeats a value")
        if "slora" in self.methods and self.slora_sparse_rounds > self.rounds:
            raise ValueError(f"slora_sparse_rounds {self.slora_sparse_rounds} is more than the {self.rounds} rounds")
        if self.fail_method is not None and self.fail_method not in self.methods:
            raise ValueError(f"fail_method {self.fail_method!r} is not one of methods {self.methods}")
        return self


def runs_planned(cfg: LEFFConfig) -> list[tuple[str, float, int]]:
    """Every (method, α, seed) the run trains, α by α and seed by seed within an α (a slow spell of
    the machine hits every method of a seed alike): all methods at the first α,
    `later_alpha_methods` (in `methods`' order) at the others."""
    later = cfg.methods if cfg.later_alpha_methods is None else [m for m in cfg.methods if m in cfg.later_alpha_methods]
    return [(m, a, s) for i, a in enumerate(cfg.alphas) for s in cfg.run_seeds()
            for m in (cfg.methods if i == 0 else later)]


def lr_rates(cfg: LEFFConfig) -> list[float]:
    """The body lrs a method is tuned over: the grid, or `lr` alone."""
    return list(cfg.lr_grid) if cfg.lr_grid is not None else [cfg.lr]


def tunes_lr(method: str) -> bool:
    """Whether the body's lr changes `method`'s run: fedhead trains the head alone (at head_lr)."""
    return method != "fedhead"


def client_capacity(cfg: LEFFConfig, partition: int) -> int:
    return cfg.capacities[partition % len(cfg.capacities)]


def client_rate(cfg: LEFFConfig, partition: int) -> float:
    """The client's compute rate, GFLOP/s."""
    return cfg.client_rates[partition % len(cfg.client_rates)]
