"""Multi-device training of the shared LM loop through Lightning Fabric (the engine the field uses;
no launcher of ours): one device, DDP or FSDP over `devices` × `num_nodes`, bf16 where the device
has it. `make_fabric` checks the request against what is visible before any process starts.

Two ways to start the processes:
- `spread(cfg, fn, ...)`, what the flows use (`runtime.distributed` in params/runtime.yaml): the processes
  are spawned from the calling one for the length of one training and rank 0's result comes back,
  so a training inside a Prefect task spreads over one node's devices without re-running the
  flow (Lightning's default DDP/FSDP launcher re-executes `sys.argv`: the whole flow, per rank).
- `make_fabric(cfg)` in a script started by `torchrun --nnodes N --nproc-per-node G` or `srun`:
  Fabric reads the cluster from the environment (MASTER_ADDR, MASTER_PORT, NODE_RANK,
  WORLD_SIZE; SLURM's variables), which is how several nodes train (README, scale-out)."""
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


Precision = Literal["32-true", "bf16-mixed", "bf16-true"]  # what "auto" resolves to, or the one asked


def resolve_precision(cfg: DistributedConfig, accelerator: str) -> Precision:
    import torch

    if cfg.precision != "auto":
        if cfg.precision.startswith("bf16") and accelerator == "cuda" and not torch.cuda.is_bf16_supported():
            raise DistributedError(f"precision {cfg.precision}: this CUDA device has no bf16")
        return cfg.precision
    return "bf16-mixed" if accelerator == "cuda" and torch.cuda.is_bf16_supported() else "32-true"


def world_size(cfg: DistributedConfig) -> int:
    return cfg.devices * cfg.num_nodes


def check_hardware(cfg: DistributedConfig, where: str) -> str:
    """The accelerator `cfg` runs on ("cpu" or "cuda"); DistributedError naming the key when the
    visible hardware cannot run it."""
    import torch

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
    return accelerator


def make_fabric(cfg: DistributedConfig, where: str = "distributed", spawn: bool = False,
                device_indices: list[int] | None = None):
    """A Fabric for `cfg`; DistributedError naming the key when the machine cannot run it.

    `spawn`: `fabric.launch(fn)` starts the processes itself (see the module's docstring).
    `device_indices`: the CUDA devices to use (those the task holds), instead of the first ones."""
    from lightning.fabric import Fabric

    accelerator = check_hardware(cfg, where)
    strategy = {"single": "auto", "fsdp": "fsdp"}.get(cfg.strategy, cfg.strategy)
    if spawn and world_size(cfg) > 1:
        strategy = _spawning_strategy(cfg.strategy)
    devices: int | list[int] = cfg.devices
    if device_indices is not None and accelerator == "cuda":
        if len(device_indices) != cfg.devices:
            raise DistributedError(f"{where}.devices: {cfg.devices} asked, {len(device_indices)} held")
        devices = list(device_indices)
    return Fabric(accelerator=accelerator, strategy=strategy, devices=devices, num_nodes=cfg.num_nodes,
                  precision=resolve_precision(cfg, accelerator))


def _spawning_strategy(name: str):
    """DDP or FSDP whose launcher spawns the processes (multiprocessing) instead of re-running the
    script: DDP has this as an option, FSDP through SpawnedFSDP below."""
    from lightning.fabric.strategies import DDPStrategy

    if name in ("ddp", "ddp_spawn", "auto"):
        return DDPStrategy(start_method="spawn")
    # the module's __getattr__ builds the class on first use (a bare name here would not reach it)
    return __getattr__("SpawnedFSDP")(state_dict_type="full")  # `spread`'s callers load the gathered state dict


def __getattr__(name: str):
    """SpawnedFSDP, built on first use (importing Lightning here would slow every task's import)
    and found by name when the spawned processes unpickle the strategy: FSDP's launcher is always
    the script re-runner, so it is swapped for the one DDP's spawn uses (Lightning's own class,
    a private API)."""
    if name != "SpawnedFSDP":
        raise AttributeError(name)
    from lightning.fabric.strategies import FSDPStrategy
    from lightning.fabric.strategies.launchers.multiprocessing import _MultiProcessingLauncher

    class SpawnedFSDP(FSDPStrategy):
        def _configure_launcher(self) -> None:
            self._launcher = _MultiProcessingLauncher(self, start_method="spawn")

    SpawnedFSDP.__module__, SpawnedFSDP.__qualname__ = __name__, "SpawnedFSDP"
    globals()["SpawnedFSDP"] = SpawnedFSDP
    return SpawnedFSDP


def runs_in_process(cfg: DistributedConfig) -> bool:
    """One CPU process: the plain loop in the calling process, no Fabric, so the default
    configuration computes exactly what it did before Fabric (one CUDA device still gets a
    one-process Fabric, for its bf16 precision)."""
    import torch

    on_cuda = cfg.accelerator == "cuda" or (cfg.accelerator == "auto" and torch.cuda.is_available())
    return world_size(cfg) == 1 and not on_cuda


def _refuse_several_nodes(cfg: DistributedConfig, where: str) -> None:
    if cfg.num_nodes > 1:
        raise DistributedError(f"{where}.num_nodes: {cfg.num_nodes} nodes cannot be spawned from one process; "
                               "start the training under torchrun or srun on each node (README, scale-out)")


def spread(cfg: DistributedConfig, fn, *args, where: str = "runtime.distributed",
           device_indices: list[int] | None = None):
    """`fn(fabric, *args)` on every process `cfg` asks for, spawned here; returns rank 0's result
    (`fn(None, *args)` here when `runs_in_process`). Several nodes are started by torchrun/srun,
    not from a flow."""
    _refuse_several_nodes(cfg, where)
    if runs_in_process(cfg):
        return fn(None, *args)
    return make_fabric(cfg, where, spawn=True, device_indices=device_indices).launch(fn, *args)


def shard_rows(x, rank: int, world: int, where: str = "batch_size"):
    """This rank's contiguous share of a global batch (the same rows every run)."""
    if x.shape[0] % world:
        raise DistributedError(f"{where}: {x.shape[0]} rows do not split over {world} processes")
    n = x.shape[0] // world
    return x[rank * n:(rank + 1) * n]


def trainer_arguments(cfg: DistributedConfig, device_indices: list[int] | None = None,
                      where: str = "runtime.distributed") -> dict:
    """A Lightning Trainer's accelerator, strategy, devices, num_nodes and precision for `cfg`,
    inside a task like `spread`: DDP's processes spawned for the fit (Lightning brings the trained
    weights back to the calling process). FSDP is for the LM loop (shards of large models); a
    Trainer here trains models that fit one device."""
    from lightning.pytorch.strategies import DDPStrategy

    if cfg.strategy == "fsdp":
        raise DistributedError(f"{where}.strategy: fsdp shards models too large for one device; this training's "
                               "model fits one, use ddp")
    accelerator = check_hardware(cfg, where)
    _refuse_several_nodes(cfg, where)
    devices: int | list[int] = cfg.devices
    if device_indices is not None and accelerator == "cuda":
        devices = list(device_indices)
    return {"accelerator": "gpu" if accelerator == "cuda" else "cpu", "devices": devices, "num_nodes": 1,
            "strategy": DDPStrategy(start_method="spawn") if world_size(cfg) > 1 else "auto",
            "precision": resolve_precision(cfg, accelerator)}
