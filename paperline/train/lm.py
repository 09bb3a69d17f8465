"""The one training loop of the language-model methods (TPA, Memory Decoder, QFFT, SUMO's C4
pretraining): AdamW (or the caller's optimizer) with linear warmup and a cosine decay to min_lr,
gradient clipping, random next-token windows from a token array (nanoGPT's sampling) or the
caller's batches, gradient accumulation over micro-batches, periodic validation on fixed windows,
a checkpoint every `checkpoint_every` steps that a killed run resumes from exactly (model,
optimizer, sampler state), a tqdm bar; on one device or, given a Lightning `fabric`
(paperline/train/distributed.py), data-parallel over its processes (DDP, FSDP; bf16 by its
precision): each process draws the same global batch and trains on its share of the rows, so the
loss curve is the one-process curve at the same global batch. Tracking stays outside: `on_log(step, metrics)` is called
at every log and eval step (the tasks forward it to MLflow)."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from paperline.data.tokens import sample_windows
from paperline.train.checkpoint import Resumable


@dataclass(frozen=True)
class LMTrainSettings:
    steps: int
    batch_size: int
    block_size: int
    lr: float
    min_lr: float
    warmup_steps: int = 0
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float | None = 1.0  # None: no clipping
    eval_every: int = 100
    eval_windows: int = 64  # validation windows of block_size (fixed, evenly spaced)
    log_every: int = 10
    checkpoint_every: int = 100
    seed: int = 0
    micro_batches: int = 1  # batches per optimizer step, their gradients accumulated

    @classmethod
    def from_config(cls, train, block_size: int, seed: int) -> "LMTrainSettings":
        """From a `paperline.config.LMTrainConfig` (or a subclass of it)."""
        return cls(block_size=block_size, seed=seed, **{k: getattr(train, k) for k in LM_TRAIN_FIELDS})


# the LMTrainConfig fields that are settings one to one (block_size and seed come from elsewhere)
LM_TRAIN_FIELDS = ("steps", "batch_size", "lr", "min_lr", "warmup_steps", "weight_decay", "grad_clip",
                   "eval_every", "eval_windows", "log_every", "checkpoint_every")


def lr_at(step: int, s: LMTrainSettings) -> float:
    """Linear warmup to lr, then cosine to min_lr at the last step (the T6 configs' schedule; an
    optimizer group with another starting lr follows it scaled, see train_lm)."""
    if step < s.warmup_steps:
        return s.lr * (step + 1) / s.warmup_steps
    progress = (step - s.warmup_steps) / max(1, s.steps - s.warmup_steps)
    return s.min_lr + 0.5 * (s.lr - s.min_lr) * (1 + math.cos(math.pi * min(1.0, progress)))


def validation_windows(tokens: np.ndarray, block_size: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Up to `count` windows at evenly spaced starts (the same every evaluation and every run)."""
    last = len(tokens) - block_size - 1
    starts = np.unique(np.linspace(0, last, num=max(1, min(count, last + 1))).astype(np.int64))
    x = np.stack([np.asarray(tokens[s:s + block_size], dtype=np.int64) for s in starts])
    y = np.stack([np.asarray(tokens[s + 1:s + 1 + block_size], dtype=np.int64) for s in starts])
    return torch.from_numpy(x), torch.from_numpy(y)


@torch.no_grad()
def evaluate(model, windows: tuple[torch.Tensor, torch.Tensor], batch_size: int, device) -> float:
    """Mean next-token cross-entropy (nats) over the windows (targets of -100 are not counted)."""
    was_training = model.training
    model.eval()
    x_all, y_all = windows
    total, count = 0.0, 0
    for i in range(0, len(x_all), batch_size):
        x, y = x_all[i:i + batch_size].to(device), y_all[i:i + batch_size].to(device)
        n = int((y != -100).sum())
        if n:
            total += model(x, labels=y).loss.item() * n
            count += n
    model.train(was_training)
    return total / count


def make_optimizer(model, s: LMTrainSettings) -> torch.optim.AdamW:
    """Weight decay on matrices only (nanoGPT's rule: not on norms, biases or gains)."""
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": s.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=s.lr, betas=(s.beta1, s.beta2))


def train_lm(model, train_tokens: np.ndarray | None, val_tokens: np.ndarray | None, s: LMTrainSettings, device,
             checkpoint_path: str | Path | None = None, fingerprint=None, progress: bool = False,
             on_log: Callable[[int, dict], None] | None = None, description: str = "train",
             sample_batch: Callable[[torch.Generator], tuple[torch.Tensor, torch.Tensor]] | None = None,
             val_batches: tuple[torch.Tensor, torch.Tensor] | None = None,
             optimizer_factory: Callable[[torch.nn.Module], torch.optim.Optimizer] | None = None,
             stop_on_divergence: bool = False, fabric=None, save_to: str | Path | None = None) -> dict:
    """Train `model` (a CausalLM) for s.steps; returns history and final validation loss/perplexity.

    By default batches are random windows of `train_tokens` and validation uses fixed windows of
    `val_tokens`. Example-level data (QFFT's padded, loss-masked sequences) passes
    `sample_batch(generator) -> (inputs, targets with -100 where no loss)` and `val_batches`
    instead; the generator is the one the checkpoint saves, so a resumed run draws the same batches.
    A sampler that reads a stream (SUMO's C4) has state_dict / load_state_dict: the checkpoint
    keeps where it stands. `optimizer_factory(model)` replaces make_optimizer's AdamW; every group
    follows the schedule scaled to its own starting lr (lr_at × group lr / s.lr). A non-finite loss
    raises, or with `stop_on_divergence` (lr sweeps) ends training: `diverged`, no validation.
    With `fabric`, `device` is the fabric's, rank 0 alone writes the checkpoint (every rank resumes
    from it) and shows the bar, and the logged loss is the mean over the processes."""
    from tqdm.auto import tqdm

    from paperline.train.distributed import shard_rows

    rank, world = (fabric.global_rank, fabric.world_size) if fabric is not None else (0, 1)
    device = fabric.device if fabric is not None else device
    model.to(device).train()
    optimizer = optimizer_factory(model) if optimizer_factory else make_optimizer(model, s)
    for group in optimizer.param_groups:
        group.setdefault("initial_lr", group["lr"])
    generator = torch.Generator().manual_seed(s.seed)
    if sample_batch is None:
        def sample_batch(g):
            assert train_tokens is not None  # without a sampler, batches are windows of train_tokens
            return sample_windows(train_tokens, s.batch_size, s.block_size, g)
    if val_batches is not None:
        windows = val_batches
    else:
        assert val_tokens is not None  # without val_batches, validation windows are of val_tokens
        windows = validation_windows(val_tokens, s.block_size, s.eval_windows)
    fingerprint = {"settings": asdict(s), "model": model.config.to_dict(), "extra": fingerprint}
    fingerprint["model"].pop("transformers_version", None)
    state = {"model": model, "optimizer": optimizer, "generator": generator}
    if hasattr(sample_batch, "state_dict"):
        state["sampler"] = sample_batch
    run = Resumable(checkpoint_path, fingerprint, s.checkpoint_every, **state)
    trained, trained_optimizer = fabric.setup(model, optimizer) if fabric is not None else (model, optimizer)
    record = run.resume() or {"step": 0, "history": {"step": [], "train_loss": [], "lr": []},
                              "eval_history": {"step": [], "val_loss": []}}
    history, eval_history = record["history"], record["eval_history"]
    diverged = False

    bar = tqdm(range(record["step"], s.steps), initial=record["step"], total=s.steps, desc=description,
               disable=not progress or rank != 0, leave=False)
    for step in bar:
        lr = lr_at(step, s)
        for group in optimizer.param_groups:
            group["lr"] = lr * (group["initial_lr"] / s.lr)
        optimizer.zero_grad(set_to_none=True)
        loss = 0.0
        for micro in range(s.micro_batches):
            x, y = sample_batch(generator)  # the global batch, the same draw on every process
            if world > 1:
                x, y = shard_rows(x, rank, world), shard_rows(y, rank, world)
            if fabric is None:
                micro_loss = model(x.to(device), labels=y.to(device)).loss / s.micro_batches
                micro_loss.backward()
            else:  # gradients are averaged over the processes at the last micro-batch's backward
                with fabric.no_backward_sync(trained, enabled=micro < s.micro_batches - 1):
                    micro_loss = trained(x.to(device), labels=y.to(device)).loss / s.micro_batches
                    fabric.backward(micro_loss)
            loss += micro_loss.item()
        if world > 1:
            loss = float(fabric.all_reduce(torch.tensor(loss, device=device), reduce_op="mean"))
        if s.grad_clip is not None:
            if fabric is None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), s.grad_clip)
            else:
                fabric.clip_gradients(trained, trained_optimizer, max_norm=s.grad_clip, error_if_nonfinite=False)
        trained_optimizer.step()
        done = record["step"] = step + 1
        if not math.isfinite(loss):
            if not stop_on_divergence:
                raise FloatingPointError(f"{description}: training loss is {loss} at step {done}")
            diverged = True
            break
        if done % s.log_every == 0 or done == s.steps:
            history["step"].append(done)
            history["train_loss"].append(loss)
            history["lr"].append(lr)
            bar.set_postfix(loss=f"{loss:.3f}")
            if on_log:
                on_log(done, {"train_loss": loss, "lr": lr})
        if done % s.eval_every == 0 or done == s.steps:
            val = evaluate(trained, windows, s.batch_size, device)
            eval_history["step"].append(done)
            eval_history["val_loss"].append(val)
            if on_log:
                on_log(done, {"val_loss": val})
        if run.due(done, s.steps) and rank == 0:
            run.save(record)
    bar.close()
    if diverged:
        val_loss = None
    else:
        val_loss = eval_history["val_loss"][-1] if eval_history["val_loss"] else evaluate(trained, windows, s.batch_size, device)
    if fabric is not None and save_to is not None:
        fabric.save(save_to, {"model": trained})
    return {"history": history, "eval_history": eval_history, "val_loss": val_loss,
            "val_perplexity": None if val_loss is None else math.exp(val_loss), "train_time_s": run.elapsed(),
            "tokens_seen": record["step"] * s.micro_batches * s.batch_size * s.block_size,
            "steps": record["step"], "diverged": diverged, "processes": world}


def train_lm_spread(distributed, model, train_tokens, val_tokens, s: LMTrainSettings, device, device_indices=None,
                    on_log: Callable[[int, dict], None] | None = None, **kwargs) -> dict:
    """`train_lm` over the devices of `distributed` (a DistributedConfig: params/runtime.yaml
    `runtime.distributed`), the processes spawned for this training (paperline/train/distributed.py);
    `model` holds the trained weights afterwards. `on_log` (an MLflow logger, which cannot cross
    into the spawned processes) is replayed from the histories once training is done. One CPU
    process: `train_lm` itself, as before."""
    import tempfile

    from paperline.train.distributed import runs_in_process, spread

    if runs_in_process(distributed):
        return train_lm(model, train_tokens, val_tokens, s, device, on_log=on_log, **kwargs)
    with tempfile.TemporaryDirectory(prefix="train-lm-") as tmp:
        weights = Path(tmp) / "trained.pt"
        # settings as a dict: Lightning's launcher rebuilds dataclass arguments field by field,
        # which a frozen one refuses
        result = spread(distributed, _train_in_process, model, _by_reference(train_tokens),
                        _by_reference(val_tokens), asdict(s), device, dict(kwargs, save_to=weights),
                        device_indices=device_indices)
        model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True)["model"])
    model.to(device)
    if on_log:
        for step, loss, lr in zip(result["history"]["step"], result["history"]["train_loss"], result["history"]["lr"]):
            on_log(step, {"train_loss": loss, "lr": lr})
        for step, val in zip(result["eval_history"]["step"], result["eval_history"]["val_loss"]):
            on_log(step, {"val_loss": val})
    return result


@dataclass
class _TokenFile:
    """A memory-mapped token file crossing into a spawned process by its path (a pickled memmap
    would be a copy of the whole corpus per process)."""
    path: str
    offset: int
    shape: tuple

    def open(self) -> np.ndarray:
        return np.memmap(self.path, dtype=np.uint16, mode="r", offset=self.offset, shape=self.shape)


def _by_reference(tokens):
    import mmap

    # a whole mapped file (a slice's offset would still be its file's: it crosses as a copy)
    if isinstance(tokens, np.memmap) and isinstance(tokens.base, mmap.mmap) and tokens.dtype == np.uint16:
        return _TokenFile(str(tokens.filename), tokens.offset, tokens.shape)
    return tokens


def _train_in_process(fabric, model, train_tokens, val_tokens, s, device, kwargs):
    train_tokens, val_tokens = (t.open() if isinstance(t, _TokenFile) else t for t in (train_tokens, val_tokens))
    s = LMTrainSettings(**s) if isinstance(s, dict) else s
    return train_lm(model, train_tokens, val_tokens, s, device, fabric=fabric, **kwargs)
