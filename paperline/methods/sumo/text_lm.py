"""The second training task of the SUMO comparison: the shared causal LM pretrained from scratch on
the committed Shakespeare tokens (`paperline.data.text_corpus`), one optimizer at one lr, through
the shared LM loop (`paperline.train.lm`, the optimizer by `optimizer_factory`).

From scratch rather than from `data/lm_base`: the paper's claim is about pretraining (moments of a
randomly initialised LLM), and the lm-base shape (128 wide, 4 layers) costs ~4× this one's step, so
12 runs of it would not fit the smoke's ~2 min on 2 cores.

What the digits task does not have: the condition number κ = σ_max/σ_min of each r×l moment SUMO
orthogonalises (the paper's argument: LLM moments are ill-conditioned, so Newton–Schulz is
inaccurate on them, theory.py), sampled after the optimizer step every `condition_every` steps,
per matrix, with their median and max over the matrices. As on C4 (lm.py): no gradient clipping,
warm-up then cosine to min_lr_ratio, the low-rank methods on the attention and MLP projections and
AdamW on the (tied) embedding; the logged training loss is the logged step's minibatch loss.

A finished run writes its result beside its checkpoint and is read back, not retrained. A killed
run resumes its training from the shared loop's checkpoint; the κ samples taken before the kill are
not in that checkpoint and are missing from the resumed run's curve (the loop checkpoints only its
own history).
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch

from paperline.data.text_corpus import load_corpus
from paperline.methods.sumo.config import SumoConfig, TextLMConfig
from paperline.methods.sumo.optimizers import OptimizerFactory, read_record, refuse_fsdp, state_formula
from paperline.methods.sumo.train import loop_schedule, run_seed
from paperline.nn.causal_lm import CausalLM, CausalLMConfig
from paperline.optim.hybrid import state_bytes, state_numel
from paperline.train import lm as lm_loop
from paperline.train.distributed import DistributedConfig, runs_in_process
from paperline.train.records import finished_unit


def text_config(cfg: SumoConfig) -> TextLMConfig:
    """The `text_lm` section, which the text-LM task needs."""
    if cfg.text_lm is None:
        raise ValueError("sumo: the text-LM task needs the `text_lm` section")
    return cfg.text_lm


def with_text_lm(cfg: SumoConfig) -> SumoConfig:
    """The method's config with the LM task's own rank, period, AdamW-part lr and steps, so the
    optimizers are built by the same `build_optimizer` as on digits."""
    t = text_config(cfg)
    return cfg.model_copy(update={"rank": t.rank, "update_period": t.update_period,
                                  "adamw_part_lr": t.adamw_part_lr, "steps": t.steps})


def model_config(t: TextLMConfig, vocab_size: int) -> CausalLMConfig:
    return CausalLMConfig(vocab_size=vocab_size, hidden_size=t.hidden_size, num_layers=t.num_layers,
                          num_heads=t.num_heads, head_dim=t.hidden_size // t.num_heads,
                          max_position_embeddings=t.block_size)


def train_settings(cfg: SumoConfig, lr: float, seed: int) -> lm_loop.LMTrainSettings:
    t = text_config(cfg)
    return lm_loop.LMTrainSettings(
        steps=t.steps, batch_size=t.batch_size, block_size=t.block_size, lr=lr,
        **loop_schedule(cfg, t.steps, lr), weight_decay=cfg.weight_decay,
        grad_clip=None, eval_every=t.eval_every, eval_windows=t.eval_windows, log_every=t.log_every,
        checkpoint_every=t.steps, seed=seed)


def fingerprint(cfg: SumoConfig, optimizer: str, lr: float, seed_index: int) -> dict:
    shared = {"seed", "alpha", "sumo_momentum", "muon_momentum", "limiter", "weight_decay", "lr_schedule",
              "warmup_fraction", "min_lr_ratio"}
    t = text_config(cfg).model_dump(exclude={"optimizers", "lr_grid", "seeds"})
    return {**cfg.model_dump(include=shared), "text_lm": t, "optimizer": optimizer, "lr": lr, "seed_index": seed_index}


def train_text_lm(cfg: SumoConfig, optimizer_name: str, lr: float, seed_index: int, device: torch.device,
                  checkpoint_path: Path | None = None, progress: bool = False,
                  distributed: DistributedConfig | None = None, device_indices: list[int] | None = None) -> dict:
    """History, κ samples and final metrics of one run (the keys of train.train_one's result where
    they mean the same; final_test_loss is the held-out loss on the corpus's validation tokens).
    `distributed` (params/runtime.yaml runtime.distributed) spreads the training over devices (DDP)."""
    distributed = distributed or DistributedConfig()
    refuse_fsdp(distributed)
    expected = fingerprint(cfg, optimizer_name, lr, seed_index)

    def train() -> dict:
        return _train(cfg, optimizer_name, lr, seed_index, device, expected, checkpoint_path, progress, distributed,
                      device_indices)

    if checkpoint_path is None:
        return train()
    # a finished run's result, beside its checkpoint
    return finished_unit(Path(checkpoint_path).with_suffix(".json"), expected, train)


def _train(cfg: SumoConfig, optimizer_name: str, lr: float, seed_index: int, device: torch.device, expected: dict,
           checkpoint_path: Path | None, progress: bool, distributed: DistributedConfig,
           device_indices: list[int] | None) -> dict:
    here = runs_in_process(distributed)
    t = text_config(cfg)
    corpus = load_corpus(t.corpus, t.block_size)
    seed = run_seed(cfg, seed_index)
    model = CausalLM.seeded(model_config(t, corpus.vocab_size), torch.Generator().manual_seed(seed))
    if here:  # spread: each process moves its copy to its device
        model.to(device)  # type: ignore[arg-type]  # in place; transformers types its `to` as unbound
    view = with_text_lm(cfg)
    settings = train_settings(cfg, lr, seed)
    # the trivial baseline: the initial model on the windows the trained one is scored on (no RNG drawn)
    initial_test_loss = lm_loop.evaluate(model, lm_loop.validation_windows(corpus.val, t.block_size, t.eval_windows),
                                         t.batch_size, device if here else "cpu")
    with tempfile.TemporaryDirectory(prefix="sumo-text-lm-") as tmp:
        # the κ samples and the state a spawned process's optimizer reports come back by this file
        record_to = None if here else f"{tmp}/record.json"
        factory = OptimizerFactory(optimizer_name, lr, view, seed, record_to=record_to,
                                   condition_every=t.condition_every, log_every=t.log_every, steps=t.steps)
        out = lm_loop.train_lm_spread(distributed, model, corpus.train, corpus.val, settings, device,
                                      device_indices=device_indices, checkpoint_path=checkpoint_path,
                                      fingerprint=expected, progress=progress,
                                      description=f"text LM {optimizer_name} lr={lr:g}",
                                      optimizer_factory=factory, stop_on_divergence=True)
        record = factory.record if record_to is None else read_record(record_to, checkpoint_path, out["steps"])
    assert record is not None  # the factory's, built by the loop in this process
    # κ at the steps the loop logged (a diverged run's last step is not)
    logged = set(out["history"]["step"])
    kappa = {key: [v for step, v in zip(record["condition"]["step"], values) if step in logged]
             for key, values in record["condition"].items()}
    steps, diverged, losses = out["steps"], out["diverged"], out["history"]["train_loss"]
    matrices = model.matrix_parameters()
    if here:
        optimizer = factory.optimizer
        assert optimizer is not None  # built by the loop, in this process
        limiter_hits = sum(s.get("limiter_hits", 0) for s in optimizer.state.values())
        floats, nbytes = state_numel(optimizer), state_bytes(optimizer)
    else:
        limiter_hits, floats, nbytes = record["limiter_hits"], record["state_floats"], record["state_bytes"]
    sumo_matrices = len(matrices) if optimizer_name.startswith("sumo") else 0
    tail = losses[-max(1, len(losses) // 10):]
    return {
        "optimizer": optimizer_name, "lr": lr, "seed_index": seed_index, "steps": steps, "diverged": diverged,
        "history": out["history"], "eval_history": out["eval_history"], "condition": kappa,
        "final_train_loss": None if diverged else float(np.mean(tail)),
        # the mean logged minibatch loss over the run: the area under the loss curve (best-lr criterion)
        "mean_train_loss": None if diverged else float(np.mean(losses)),
        "final_test_loss": out["val_loss"], "val_perplexity": out["val_perplexity"], "final_test_accuracy": None,
        "initial_test_loss": initial_test_loss,
        "parameters": sum(p.numel() for p in model.parameters()),
        "state_floats": floats, "state_bytes": nbytes,
        "state_floats_formula": state_formula(optimizer_name, model, view.rank),
        "step_ms": 1000 * out["train_time_s"] / max(steps, 1),
        "limiter_fraction": limiter_hits / (steps * sumo_matrices) if sumo_matrices and steps else None,
        "processes": out["processes"],
    }
