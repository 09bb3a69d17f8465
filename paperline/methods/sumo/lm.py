"""LLaMA pretraining on C4 with one optimizer at one lr: the GaLore protocol the SUMO paper reports
(validation perplexity and memory; spec §c), trained by the shared LM loop (`paperline.train.lm`).
What is SUMO's own here: the C4 batches, the optimizer and the step-time measurement.

As GaLore's torchrun_main.py: the LLaMA of LLAMA_SIZES (`paperline.nn.causal_lm.llama_config`) in
cfg.lm.dtype (bf16), `batch_size` sequences per optimizer step in micro-batches (gradient
accumulation), warm-up then cosine decay to min_lr_ratio, no gradient clipping, no weight decay
(the profile's), the low-rank methods on the attention and MLP projections and AdamW on embeddings,
norms and lm_head, every run on the same data order (shuffle seed 42). Validation: the
token-weighted mean loss over the first cfg.lm.eval_tokens non-pad tokens of the
(seed-42-shuffled) validation shards, every eval_every steps and at the end; perplexity = exp(loss).
(GaLore averages per-batch losses instead: the same up to how padding weighs batches.) The logged
training loss is that of the logged step, as the shared loop logs it [I: before the loop was
shared, the mean of the steps since the previous log]. Over several devices by params/runtime.yaml
`runtime.distributed` (`train_lm_spread`: DDP, each process training on its share of every
micro-batch, so the global batch and the data order stay the paper's); not FSDP, whose shards
would split the matrices the low-rank optimizers project (`refuse_fsdp`).
"""
from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from paperline.data.c4 import C4Tokenizer, train_batches, validation_batches
from paperline.methods.sumo.config import LLAMA_SIZES, LlamaC4Config, OptimizerName, SumoConfig
from paperline.methods.sumo.optimizers import OptimizerFactory, build_optimizer, read_record, refuse_fsdp, state_formula
from paperline.methods.sumo.train import loop_schedule, run_seed
from paperline.nn.causal_lm import CausalLM, CausalLMConfig, llama_config
from paperline.optim.hybrid import state_bytes, state_numel
from paperline.train import lm as lm_loop
from paperline.train.distributed import DistributedConfig, runs_in_process

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


def c4_config(cfg: SumoConfig) -> LlamaC4Config:
    """The `lm` section, which the LLaMA-on-C4 task needs."""
    if cfg.lm is None:
        raise ValueError("sumo: the llama_c4 task needs the `lm` section")
    return cfg.lm


def model_config(cfg: SumoConfig) -> CausalLMConfig:
    lm = c4_config(cfg)
    size = LLAMA_SIZES[lm.model_size]
    return llama_config(**size | ({"vocab_size": lm.vocab_size} if lm.vocab_size else {}))


def make_llama(cfg: SumoConfig, seed: int, device: torch.device) -> CausalLM:
    model = CausalLM.seeded(model_config(cfg), torch.Generator().manual_seed(seed))
    # in place (it returns the model); transformers types its `to` as unbound
    model.to(device=device, dtype=DTYPES[c4_config(cfg).dtype])  # type: ignore[call-arg]
    return model


def next_token_pairs(tokens: torch.Tensor, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded sequences as (inputs, next-token targets); a pad target is -100 (no loss)."""
    targets = tokens[:, 1:].clone()
    targets[targets == pad_id] = -100
    return tokens[:, :-1], targets


class C4Batches:
    """`sample_batch` of the shared loop: the next micro-batch of the seeded C4 stream (the loop's
    generator is not used: every run reads the same order). Its state, the batches read and the
    non-pad tokens served, lets a resumed run skip to where the killed one stood."""

    def __init__(self, lm: LlamaC4Config, tokenizer: C4Tokenizer):
        self.lm, self.tokenizer = lm, tokenizer
        self.batches, self.tokens = 0, 0
        self.stream: Iterator[torch.Tensor] | None = None

    def __call__(self, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        if self.stream is None:
            self.stream = train_batches(self.lm.c4_dir, self.tokenizer, self.lm.micro_batch_size,
                                        self.lm.shuffle_seed, self.lm.shuffle_buffer, skip_batches=self.batches)
        tokens = next(self.stream)
        self.batches += 1
        self.tokens += int((tokens != self.tokenizer.pad_id).sum())
        return next_token_pairs(tokens, self.tokenizer.pad_id)

    def state_dict(self) -> dict:
        return {"batches": self.batches, "tokens": self.tokens}

    def load_state_dict(self, state: dict) -> None:
        self.batches, self.tokens, self.stream = state["batches"], state["tokens"], None


def validation_set(cfg: SumoConfig, tokenizer: C4Tokenizer) -> tuple[torch.Tensor, torch.Tensor]:
    lm = c4_config(cfg)
    pairs = [next_token_pairs(tokens, tokenizer.pad_id) for tokens in
             validation_batches(lm.c4_dir, tokenizer, lm.micro_batch_size, lm.eval_tokens)]
    if not any(bool((targets != -100).any()) for _, targets in pairs):
        raise ValueError(f"{lm.c4_dir}: the validation shards gave no tokens to evaluate on")
    return torch.cat([x for x, _ in pairs]), torch.cat([y for _, y in pairs])


def train_settings(cfg: SumoConfig, lr: float, seed: int) -> lm_loop.LMTrainSettings:
    """The GaLore protocol as the shared loop's settings (weight decay is the optimizer's own)."""
    lm = c4_config(cfg)
    return lm_loop.LMTrainSettings(
        steps=cfg.steps, batch_size=lm.micro_batch_size, block_size=lm.max_length - 1, lr=lr,
        **loop_schedule(cfg, cfg.steps, lr), weight_decay=cfg.weight_decay,
        grad_clip=None, eval_every=lm.eval_every, log_every=cfg.log_every,
        checkpoint_every=cfg.checkpoint_every, seed=seed, micro_batches=cfg.batch_size // lm.micro_batch_size)


def lm_fingerprint(cfg: SumoConfig, optimizer: str, lr: float, seed_index: int) -> dict:
    keep = {"seed", "steps", "batch_size", "rank", "update_period", "alpha", "sumo_momentum", "muon_momentum",
            "limiter", "weight_decay", "adamw_part_lr", "lr_schedule", "warmup_fraction", "min_lr_ratio",
            "log_every", "lm"}
    return {**cfg.model_dump(include=keep), "optimizer": optimizer, "lr": lr, "seed_index": seed_index}


def pretrain_on_c4(cfg: SumoConfig, optimizer_name: str, lr: float, seed_index: int, device: torch.device,
             checkpoint_path: Path | None = None, progress: bool = False,
             distributed: DistributedConfig | None = None, device_indices: list[int] | None = None) -> dict:
    """History and final metrics of one pretraining run (same keys as train.train_one's where they
    mean the same; final_test_loss is the validation loss). Resumes from checkpoint_path. step_ms is
    the run's wall time per step (evaluations included); the optimizers' step times are
    llama_step_times'. `distributed` (params/runtime.yaml runtime.distributed) spreads it over devices
    (`device_indices`: the CUDA devices the task holds)."""
    distributed = distributed or DistributedConfig()
    refuse_fsdp(distributed)
    here = runs_in_process(distributed)
    lm = c4_config(cfg)
    seed = run_seed(cfg, seed_index)
    # spread: built on the CPU, each process moves its copy to its own device
    model = make_llama(cfg, seed, device if here else torch.device("cpu"))
    tokenizer = C4Tokenizer(lm.tokenizer, lm.max_length, lm.pad_token, model.config.vocab_size)
    batches = C4Batches(lm, tokenizer)
    with tempfile.TemporaryDirectory(prefix="sumo-") as tmp:
        # what a spawned process's optimizer reports comes back through this file (rank 0 writes it)
        record_to = None if here else str(Path(tmp) / "optimizer.json")
        factory = OptimizerFactory(optimizer_name, lr, cfg, seed, record_to=record_to, sampler=batches)
        if here and device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        out = lm_loop.train_lm_spread(
            distributed, model, None, None, train_settings(cfg, lr, seed), device, device_indices=device_indices,
            checkpoint_path=checkpoint_path, fingerprint=lm_fingerprint(cfg, optimizer_name, lr, seed_index),
            progress=progress, description=f"LLaMA-{lm.model_size} {optimizer_name} lr={lr:g}",
            sample_batch=batches, val_batches=validation_set(cfg, tokenizer),
            optimizer_factory=factory, stop_on_divergence=True)
        spawned = None if record_to is None else read_record(record_to, checkpoint_path, out["steps"])
    steps, diverged, losses = out["steps"], out["diverged"], out["history"]["train_loss"]
    if here:
        optimizer = factory.optimizer
        assert optimizer is not None  # built by the loop, in this process
        limiter_hits = sum(s.get("limiter_hits", 0) for s in optimizer.state.values())
        floats, nbytes, tokens = state_numel(optimizer), state_bytes(optimizer), batches.tokens
        peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    else:
        assert spawned is not None  # record_to is set when the run is spread
        limiter_hits, floats, nbytes = spawned["limiter_hits"], spawned["state_floats"], spawned["state_bytes"]
        tokens, peak = spawned["sampler"]["tokens"], spawned["peak_memory_bytes"]
    sumo_matrices = len(model.matrix_parameters()) if optimizer_name.startswith("sumo") else 0
    tail = losses[-max(1, len(losses) // 10):]
    return {
        "optimizer": optimizer_name, "lr": lr, "seed_index": seed_index, "steps": steps, "diverged": diverged,
        "history": out["history"], "eval_history": out["eval_history"],
        "final_train_loss": None if diverged else float(np.mean(tail)),
        "mean_train_loss": None if diverged else float(np.mean(losses)),
        "final_test_loss": out["val_loss"],
        "val_perplexity": out["val_perplexity"],
        "final_test_accuracy": None,
        "tokens_seen": tokens,
        "parameters": sum(p.numel() for p in model.parameters()),
        "state_floats": floats, "state_bytes": nbytes,
        "state_floats_formula": state_formula(optimizer_name, model, cfg.rank),
        "step_ms": 1000 * out["train_time_s"] / max(steps, 1),
        "peak_memory_bytes": peak,
        "limiter_fraction": limiter_hits / (steps * sumo_matrices) if sumo_matrices and steps else None,
        "processes": out["processes"],
    }


def llama_step_times(cfg: SumoConfig, device: torch.device) -> dict[str, dict[str, float]]:
    """Step time and state bytes of every optimizer of cfg on the configured LLaMA, round-robin in
    one process on random tokens of one micro-batch (timing.measure_step_times)."""
    from paperline.methods.sumo.timing import measure_step_times

    seed = run_seed(cfg, 0)
    vocab = model_config(cfg).vocab_size

    def builder(name: OptimizerName):
        def build():
            model = make_llama(cfg, seed, device)
            return model, build_optimizer(name, model, min(cfg.lr_grid[name]), cfg, seed=seed)
        return build

    gen = torch.Generator().manual_seed(seed)
    lm = c4_config(cfg)
    batches = [torch.randint(1, vocab, (lm.micro_batch_size, lm.max_length), generator=gen).to(device)
               for _ in range(2)]
    return measure_step_times({name: builder(name) for name in cfg.optimizers}, batches, cfg.timing_rounds,
                              cfg.timing_steps,
                              loss_fn=lambda model, tokens: model(tokens[:, :-1], labels=tokens[:, 1:]).loss)
