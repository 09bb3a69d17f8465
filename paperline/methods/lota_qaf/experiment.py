"""The experiment of spec §e on one (task, bit width): quantise the float model's target layers
(RTN, or sequential GPTQ from calibration inputs), then for each recovery method train its adapter for the
step budget, score it before and after its merge, and check the merge's properties.

A task is a small object that samples a training batch, computes the loss, scores a model and
holds a fixed probe batch (the merged and unmerged outputs are compared on it). `DigitsTask`
scores test accuracy (higher is better), `LMTask` held-out perplexity (lower is better).
"""
from __future__ import annotations

import contextlib
import copy
import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from paperline.data.digits import CLASSES, FEATURES
from paperline.methods.lota_qaf.config import AdapterSettings, LotaSettings
from paperline.methods.lota_qaf.layers import LotaLinear, QALoraLinear, QuantLinear, replace_module, select_targets
from paperline.methods.lota_qaf.quant import QuantError, quantize_gptq, quantize_rtn, requantize
from paperline.methods.lota_qaf.tsignsgd import TSignSGD
from paperline.nn.mlp import MLP
from paperline.seeds import seeded_init

# ----------------------------------------------------------------------------- tasks


@dataclass
class Task:
    name: str
    metric: str  # "accuracy" or "perplexity"
    higher_is_better: bool
    sample_batch: Callable[[torch.Generator], tuple]
    loss: Callable[[nn.Module, tuple], torch.Tensor]
    score: Callable[[nn.Module], dict]  # {metric: ..., "loss": ...}
    probe: Callable[[nn.Module], torch.Tensor]  # outputs on a fixed batch
    calibration: list  # input batches for GPTQ


def digits_task(x_train, y_train, x_test, y_test, batch_size: int) -> Task:
    x_train, y_train = torch.as_tensor(x_train, dtype=torch.float32), torch.as_tensor(y_train)
    x_test, y_test = torch.as_tensor(x_test, dtype=torch.float32), torch.as_tensor(y_test)

    def sample(gen):
        idx = torch.randint(len(x_train), (batch_size,), generator=gen)
        return x_train[idx], y_train[idx]

    @torch.no_grad()
    def score(model):
        logits = model(x_test)
        return {"accuracy": float((logits.argmax(1) == y_test).float().mean()),
                "loss": float(F.cross_entropy(logits, y_test))}

    return Task("digits", "accuracy", True, sample, lambda m, b: F.cross_entropy(m(b[0]), b[1]), score,
                lambda m: m(x_test), [x_train[i:i + 256] for i in range(0, len(x_train), 256)])


def lm_task(train_tokens: np.ndarray, val_tokens: np.ndarray, block_size: int, batch_size: int,
            eval_windows: int, calibration_windows: int) -> Task:
    from paperline.data.tokens import sample_windows
    from paperline.train.lm import validation_windows

    windows = validation_windows(val_tokens, block_size, eval_windows)
    calib = validation_windows(train_tokens, block_size, calibration_windows)[0]

    def loss(model, batch):
        # from the logits, not `labels=`: our targets are already shifted, and a transformers
        # model (LlamaForCausalLM, the paper profile's) shifts `labels` once more
        logits = model(batch[0]).logits
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), batch[1].reshape(-1))

    @torch.no_grad()
    def score(model):
        model.eval()
        total, count = 0.0, 0
        for i in range(0, len(windows[0]), batch_size):
            x, y = windows[0][i:i + batch_size], windows[1][i:i + batch_size]
            total += float(loss(model, (x, y))) * y.numel()
            count += y.numel()
        return {"perplexity": math.exp(total / count), "loss": total / count}

    return Task("lm", "perplexity", False, lambda gen: sample_windows(train_tokens, batch_size, block_size, gen),
                loss, score,
                lambda m: m(windows[0][:4]).logits, [calib[i:i + batch_size] for i in range(0, len(calib), batch_size)])


@contextlib.contextmanager
def global_stream_from(generator: torch.Generator):
    """The global torch RNG seeded from `generator` inside the block and restored after it: for
    inits that draw from the global stream (nn.Linear's, peft's lora_A), whose state otherwise
    depends on what ran before in the process (the order in which the flow's groups got the slot)."""
    with seeded_init(int(torch.randint(2 ** 31, (1,), generator=generator))):
        yield


def make_mlp(hidden: int, generator: torch.Generator) -> nn.Sequential:
    """64 → hidden → hidden → 10, ReLU."""
    with global_stream_from(generator):
        return MLP(FEATURES, [hidden, hidden], CLASSES)


# ----------------------------------------------------------------------------- quantisation


class _StopForward(Exception):
    """Raised by a calibration hook once its layer's inputs are recorded: the rest of the forward
    is not needed."""


@torch.no_grad()
def layer_hessian(model: nn.Module, name: str, batches: list) -> torch.Tensor:
    """H = 2 XᵀX / n of layer `name`'s inputs over the calibration batches, each forward stopped
    right after the layer (its inputs are all GPTQ needs)."""
    layer = model.get_submodule(name)
    total, count = None, 0

    def record(_module, inputs):
        nonlocal total, count
        x = inputs[0].reshape(-1, inputs[0].shape[-1]).double()
        total = x.t() @ x if total is None else total + x.t() @ x
        count += x.shape[0]
        raise _StopForward

    handle = layer.register_forward_pre_hook(record)
    try:
        model.eval()
        for batch in batches:
            try:
                model(batch)
            except _StopForward:
                pass
    finally:
        handle.remove()
    if total is None:
        raise QuantError(f"{name}: the calibration batches never reach this layer (no inputs for GPTQ)")
    return 2 * total / count


@torch.no_grad()
def execution_order(model: nn.Module, names: list[str], batch) -> list[str]:
    """The target layers in the order a forward first calls them (not the order of registration)."""
    order: list[str] = []
    handles = [model.get_submodule(n).register_forward_pre_hook(
        lambda _m, _i, n=n: order.append(n) if n not in order else None) for n in names]
    try:
        model.eval()
        model(batch)
    finally:
        for h in handles:
            h.remove()
    return order + [n for n in names if n not in order]


def quantize_model(model: nn.Module, targets: list[str], bits: int, group_size: int, quantizer: str,
                   calibration: list | None = None, damp: float = 0.01) -> nn.Module:
    """A copy of `model` whose target nn.Linear layers are QuantLinear.

    GPTQ is sequential, as the reference's: the layers are quantised in the order the forward
    reaches them, each from the inputs it receives in the model whose earlier layers are already
    quantised, so every layer's error feedback also corrects the error of the layers before it.
    The reference does this block by block with `true_sequential` ([q, k, v], o, [gate, up], down
    within a block); we go layer by layer, which is the same for layers that share their input
    (q, k, v read the same hidden state whether or not q is quantised yet). Cost: a forward prefix
    per layer (stopped at the layer), not the reference's one pass per block over cached inputs."""
    names = select_targets(model, targets)
    quantized = copy.deepcopy(model)
    if quantizer == "gptq":
        if not calibration:
            raise QuantError("quantizer gptq: no calibration batches")
        names = execution_order(quantized, names, calibration[0])
    for name in names:
        layer = quantized.get_submodule(name)
        assert isinstance(layer, nn.Linear)  # still the float one
        if quantizer == "gptq":
            assert calibration  # checked above
            w = quantize_gptq(layer.weight, layer_hessian(quantized, name, calibration), bits, group_size, damp)
        else:
            w = quantize_rtn(layer.weight, bits, group_size)
        replace_module(quantized, name, QuantLinear(w, layer.bias))
    return quantized.requires_grad_(False)


def quant_layers(model: nn.Module) -> dict[str, QuantLinear]:
    return {n: m for n, m in model.named_modules() if isinstance(m, QuantLinear)}


def model_bytes(model: nn.Module) -> int:
    """Bytes as deployed: QuantLinear layers packed (b-bit codes, fp16 scales and zeros), every other
    parameter in 16 bits (tied weights counted once)."""
    quant = quant_layers(model)
    nbytes = sum(m.nbytes() for m in quant.values())
    return nbytes + 2 * sum(p.numel() for p in model.parameters())


# ----------------------------------------------------------------------------- recovery


def dequantized_float_model(quantized: nn.Module) -> nn.Module:
    """The quantised model with each QuantLinear as an nn.Linear holding s(Q − z): the base peft's
    LoRA trains on (16-bit LoRA over the quantised weights)."""
    model = copy.deepcopy(quantized)
    for name, layer in quant_layers(model).items():
        linear = nn.Linear(layer.in_features, layer.out_features, bias=layer.bias is not None)
        with torch.no_grad():
            linear.weight.copy_(layer.dequantized())
            if layer.bias is not None:
                linear.bias.copy_(layer.bias)
        replace_module(model, name, linear)
    return model.requires_grad_(False)


def peft_lora(model: nn.Module, names: list[str], s: AdapterSettings):
    from peft import LoraConfig, get_peft_model

    # peft annotates lora_alpha int but only divides it by r: the config's float is kept
    return get_peft_model(model, LoraConfig(r=s.rank, lora_alpha=s.alpha, lora_dropout=0.0,  # type: ignore[arg-type]
                                            target_modules=names, bias="none"))


def wrap(quantized: nn.Module, method: str, lota: LotaSettings, adapter: AdapterSettings,
         generator: torch.Generator):
    """(the model to train, its optimizer factory) for `method` over a copy of the quantised model."""
    layers = quant_layers(quantized)
    names = list(layers)
    if method == "lora":
        for name in names:  # peft's rank check is lazy: fail here with our key, before training
            layer = layers[name]
            if adapter.rank > min(layer.in_features, layer.out_features):
                raise QuantError(f"lora.rank: rank {adapter.rank} above the width of {name} "
                                 f"({layer.in_features} → {layer.out_features})")
        with global_stream_from(generator):
            model = peft_lora(dequantized_float_model(quantized), names, adapter)
        return model, lambda params, steps: torch.optim.AdamW(params, lr=adapter.lr, weight_decay=0.0)
    model = copy.deepcopy(quantized).requires_grad_(False)
    for name in names:
        base = model.get_submodule(name)
        assert isinstance(base, QuantLinear)
        adapted = (LotaLinear(base, lota.rank, lota.threshold(), generator) if method == "lota"
                   else QALoraLinear(base, adapter.rank, adapter.alpha, generator))
        replace_module(model, name, adapted)
    if method == "lota":
        return model, lambda params, steps: TSignSGD(params, steps)
    return model, lambda params, steps: torch.optim.AdamW(params, lr=adapter.lr, weight_decay=0.0)


def merge(model: nn.Module, method: str, quantized: nn.Module) -> nn.Module:
    """The int-b model after the merge: LoTA and QA-LoRA merge layer by layer; LoRA is merged by
    peft in float (W + sBA), then rounded onto the quantised model's fixed grid (naive merge)."""
    if method == "lora":
        from peft import PeftModel

        assert isinstance(model, PeftModel)  # wrap's
        merged = model.merge_and_unload()
        for name, grid in quant_layers(quantized).items():
            layer = merged.get_submodule(name)
            replace_module(merged, name, QuantLinear(requantize(layer.weight.detach(), grid.weight_q), grid.bias))
        return merged.requires_grad_(False)
    merged = copy.deepcopy(model)
    for name, layer in list(merged.named_modules()):
        if isinstance(layer, (LotaLinear, QALoraLinear)):
            replace_module(merged, name, layer.merge())
    return merged.requires_grad_(False)


def changed_share(merged: nn.Module, quantized: nn.Module) -> float:
    """The share of quantised codes the merge changed."""
    before, after = quant_layers(quantized), quant_layers(merged)
    changed = sum(int((after[n].q != before[n].q).sum()) for n in before)
    return changed / sum(before[n].q.numel() for n in before)


def recover(quantized: nn.Module, task: Task, method: str, steps: int, lota: LotaSettings,
            adapter: AdapterSettings, seed: int, on_step: Callable[[int, float], None] | None = None) -> dict:
    """Train `method`'s adapter on the quantised model for `steps`, then merge. Returns its scores
    before and after the merge, the merge's checks, and the trained/merged models."""
    generator = torch.Generator().manual_seed(seed)
    model, make_opt = wrap(quantized, method, lota, adapter, generator)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = make_opt(params, steps)
    history = []
    started = time.perf_counter()
    model.train()
    for step in range(steps):
        loss = task.loss(model, task.sample_batch(generator))
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.append(float(loss.detach()))
        if on_step:
            on_step(step, history[-1])
    train_seconds = time.perf_counter() - started
    model.eval()
    before = task.score(model)
    with torch.no_grad():
        probe_before = task.probe(model)
    merged = merge(model, method, quantized)
    after = task.score(merged)
    with torch.no_grad():
        probe_after = task.probe(merged)
    codes = [layer.q for layer in quant_layers(merged).values()]
    return {
        "before": before, "after": after, "history": history, "train_seconds": train_seconds,
        "merge_gap": after[task.metric] - before[task.metric],
        "bit_identical": bool(torch.equal(probe_before, probe_after)),
        "max_output_diff": float((probe_before - probe_after).abs().max()),
        "codes_on_grid": all(int(q.min()) >= 0 and int(q.max()) <= layer.qmax
                             for q, layer in zip(codes, quant_layers(merged).values())),
        "changed_share": changed_share(merged, quantized),
        "trainable_params": sum(p.numel() for p in params),
        "merged_bytes": model_bytes(merged),
        "model": model, "merged": merged,
    }
