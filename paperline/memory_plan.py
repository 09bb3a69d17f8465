"""Memory plans for training a model at a paper profile: how many bytes the parameters, gradients,
optimizer state and activations take, and which strategy (one device, DDP, FSDP) on how many
devices of a given memory that needs.

Accounting (bf16 mixed precision with fp32 master weights, the usual recipe): a trainable
parameter costs 4 B (fp32 weight) + 4 B (fp32 gradient) + the optimizer's state (AdamW: 8 B, two
fp32 moments; a method's own optimizer passes its state floats); a frozen one 2 B (bf16), or
`quantized_bits`/8 B when it is stored quantized (its scales and zero points counted in the bits). Activation
memory of a transformer layer follows Korthikanti et al. 2022 (*Reducing Activation Recomputation
in Large Transformer Models*) with fused (flash/SDPA) attention, whose s²-term is gone: 34·s·b·h
bytes a layer, or 2·s·b·h with activation checkpointing (the layer input kept; one layer's full set
recomputed at a time). The LM head adds b·s·V·10 bytes (bf16 logits, their fp32 copy for the
loss, its gradient). Models that are not transformers pass their activation bytes directly.

FSDP (ZeRO-3) shards weights, gradients and optimizer state over N devices; activations stay per
device. The plan takes the smallest N whose shard plus one micro-batch's activations fit the
usable memory (a 10% margin for the allocator and workspace)."""
from __future__ import annotations

import math
from dataclasses import dataclass

GIB = 2**30
H200_BYTES = 141 * 10**9  # an H200-class device (141 GB HBM3e)
USABLE = 0.9


@dataclass(frozen=True)
class Workload:
    """What one training step at the paper profile holds in memory."""

    name: str
    trainable: int  # parameters
    frozen: int = 0
    quantized: int = 0  # frozen parameters stored at `quantized_bits` bits each (an int-b base)
    quantized_bits: float = 4.0  # b, plus the per-group scale and zero point spread over the group
    optimizer_state_floats: int | None = None  # fp32 floats; None: AdamW's 2 per trainable parameter
    activation_bytes_per_sample: float = 0.0  # at the paper's sequence length (or input size)
    micro_batch: int = 1
    global_batch: int = 1
    note: str = ""


def transformer_activation_bytes(seq: int, hidden: int, layers: int, vocab: int, checkpointing: bool = False) -> float:
    """Bytes of one sample's activations through a pre-norm transformer LM (see the module)."""
    per_layer = (2 if checkpointing else 34) * seq * hidden
    recompute = 34 * seq * hidden if checkpointing else 0  # one layer's full set while it is recomputed
    return layers * per_layer + recompute + 10 * seq * vocab


@dataclass(frozen=True)
class Plan:
    workload: str
    parameters: int
    weights_gib: float
    gradients_gib: float
    optimizer_gib: float
    states_gib: float  # weights + gradients + optimizer
    activations_gib: float  # one micro-batch
    micro_batch: int
    accumulation: int  # micro-batches per optimizer step on one device at the global batch
    strategy: str
    devices: int
    note: str


def plan(w: Workload, device_bytes: float = H200_BYTES, usable: float = USABLE) -> Plan:
    """The cheapest strategy for `w` on devices of `device_bytes` (see the module)."""
    weights = 4 * w.trainable + 2 * w.frozen + w.quantized * w.quantized_bits / 8
    grads = 4 * w.trainable
    optimizer = 4 * (2 * w.trainable if w.optimizer_state_floats is None else w.optimizer_state_floats)
    states = weights + grads + optimizer
    budget = usable * device_bytes
    micro = max(1, w.micro_batch)
    # the largest micro-batch ≤ the paper's that fits beside the full states on one device
    while micro > 1 and states + micro * w.activation_bytes_per_sample > budget:
        micro //= 2
    activations = micro * w.activation_bytes_per_sample
    if states + activations <= budget:
        strategy, devices = "single", 1  # DDP over more devices only for speed
    else:
        micro = 1
        activations = w.activation_bytes_per_sample
        room = budget - activations
        if room <= 0:
            # one sample's activations exceed a device: checkpointing or sequence parallelism needed
            strategy, devices = "infeasible", 0
        else:
            strategy, devices = "fsdp", max(2, math.ceil(states / room))  # FULL_SHARD over `devices`
    per_step = micro * (devices if strategy == "fsdp" else 1)  # samples one forward/backward covers
    accumulation = max(1, math.ceil(w.global_batch / per_step))
    return Plan(w.name, w.trainable + w.frozen + w.quantized, weights / GIB, grads / GIB, optimizer / GIB, states / GIB,
                activations / GIB, micro, accumulation, strategy, devices, w.note)


def markdown(plans: list[Plan], device: str = "H200 (141 GB, 90% usable)") -> str:
    """A table for a method's page."""
    lines = [f"| workload | params | weights+grads+optimizer (GiB) | activations / micro-batch (GiB) | micro-batch × accumulation | strategy on {device} | note |",
             "| --- | ---: | ---: | ---: | --- | --- | --- |"]
    for p in plans:
        where = {"single": "1 device", "fsdp": f"FSDP × {p.devices}", "infeasible": "does not fit"}[p.strategy]
        lines.append(f"| {p.workload} | {p.parameters / 1e6:,.1f}M | {p.states_gib:,.1f} "
                     f"({p.weights_gib:,.1f} + {p.gradients_gib:,.1f} + {p.optimizer_gib:,.1f}) | "
                     f"{p.activations_gib:,.2f} | {p.micro_batch} × {p.accumulation} | {where} | {p.note} |")
    return "\n".join(lines)
