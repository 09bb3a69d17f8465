"""Multi-device training of the shared LM loop through Lightning Fabric (the engine the field uses;
no launcher of ours): one device, DDP or FSDP over `devices` × `num_nodes`, bf16 where the device
has it. `make_fabric` checks the request against what is visible before any process starts.

Multi-node and `torchrun`: Fabric reads the cluster from the environment (MASTER_ADDR, MASTER_PORT,
NODE_RANK, WORLD_SIZE; SLURM's variables on a SLURM cluster), so the same params run under
`torchrun --nnodes N --nproc-per-node G` or `srun`; see the README's scale-out section."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from paperline.config import StrictModel


class DistributedConfig(StrictModel):
    """How one training spreads over devices (the Fabric arguments)."""

    strategy: Literal["auto", "single", "ddp", "ddp_spawn", "fsdp"] = "auto"
    accelerator: Literal["auto", "cpu", "cuda"] = "auto"
    devices: int = Field(1, ge=1)
    num_nodes: int = Field(1, ge=1)
    # auto: bf16 mixed precision on a CUDA device that has bf16, fp32 elsewhere
    precision: Literal["auto", "32-true", "bf16-mixed", "bf16-true"] = "auto"


class DistributedError(ValueError):
    """A strategy the visible hardware cannot run."""


def resolve_precision(cfg: DistributedConfig, accelerator: str) -> str:
    import torch

    if cfg.precision != "auto":
        if cfg.precision.startswith("bf16") and accelerator == "cuda" and not torch.cuda.is_bf16_supported():
            raise DistributedError(f"precision {cfg.precision}: this CUDA device has no bf16")
        return cfg.precision
    return "bf16-mixed" if accelerator == "cuda" and torch.cuda.is_bf16_supported() else "32-true"


def make_fabric(cfg: DistributedConfig, where: str = "distributed"):
    """A Fabric for `cfg`; DistributedError naming the key when the machine cannot run it."""
    import torch
    from lightning.fabric import Fabric

    accelerator = cfg.accelerator if cfg.accelerator != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    if accelerator == "cuda":
        visible = torch.cuda.device_count()
        if visible == 0:
            raise DistributedError(f"{where}.accelerator: cuda, but no CUDA device is visible")
        if cfg.devices > visible:
            raise DistributedError(f"{where}.devices: {cfg.devices} devices a node asked, {visible} visible")
    if cfg.strategy == "fsdp" and accelerator == "cpu":
        raise DistributedError(f"{where}.strategy: fsdp needs CUDA devices (FSDP does not run on CPU); use ddp")
    if cfg.strategy == "single" and cfg.devices * cfg.num_nodes > 1:
        raise DistributedError(f"{where}.strategy: single runs one device, but devices × num_nodes = "
                               f"{cfg.devices * cfg.num_nodes}")
    strategy = {"single": "auto", "fsdp": "fsdp"}.get(cfg.strategy, cfg.strategy)
    return Fabric(accelerator=accelerator, strategy=strategy, devices=cfg.devices, num_nodes=cfg.num_nodes,
                  precision=resolve_precision(cfg, accelerator))


def shard_rows(x, rank: int, world: int, where: str = "batch_size"):
    """This rank's contiguous share of a global batch (the same rows every run)."""
    if x.shape[0] % world:
        raise DistributedError(f"{where}: {x.shape[0]} rows do not split over {world} processes")
    n = x.shape[0] // world
    return x[rank * n:(rank + 1) * n]
