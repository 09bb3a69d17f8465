"""The prologue of one unit of work, written once: torch's threads, the `gpu` slot(s) and their
devices, the unit's MLflow child run and the method's models folder. A method's task opens
`with unit(ctx, name, params, threads=...) as u:` and does inside only what is the method's own.

Order (as every task did by hand): threads first, then the slot (the unit waits there for its
turn), then the child run, so a run's wall time in MLflow is its work, not its wait."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from tasks import track
from tasks.paths import models_dir
from tasks.runners import gpu_devices


@dataclass(frozen=True)
class Unit:
    devices: list[Any]      # the torch devices the unit holds (one, or a distributed training's)
    run: track.Run | None   # its MLflow child run; None for a unit that records no run of its own
    models: Path            # models/<method>/: the unit's checkpoints go under it

    @property
    def device(self) -> Any:
        """The first (or only) device: where a single-device unit puts its tensors."""
        return self.devices[0]


def set_threads(threads: int) -> None:
    """torch's intra-op threads for this process (small matmuls run faster on one)."""
    import torch

    torch.set_num_threads(threads)


@contextlib.contextmanager
def unit(ctx: track.RunContext, name: str | None = None, params: Mapping[str, Any] | None = None, *,
         threads: int | None = None, parent: track.Run | None = None, devices: int = 1,
         log_device: bool = True) -> Iterator[Unit]:
    """Run a unit of `ctx`'s method: with `threads` set (None: left as they are), holding `devices`
    slots of the `gpu` limit, inside the child run `name` (under `parent`, else the flow's parent
    run) with `params` and, when `log_device`, the held devices as param `device` ("cuda:0",
    "cpu", "cuda:0,cuda:1"). Without `name` no run is opened (the unit's runs are its own)."""
    if threads is not None:
        set_threads(threads)
    with gpu_devices(devices) as held:
        models = models_dir(ctx.method)
        if name is None:
            yield Unit(held, None, models)
            return
        logged = dict(params or {}) | ({"device": ",".join(map(str, held))} if log_device else {})
        with ctx.child(name, logged, parent=parent) as run:
            yield Unit(held, run, models)
