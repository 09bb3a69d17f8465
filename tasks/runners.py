"""Task runners, GPU tagging and device choice.

A task that trains or evaluates a model is a *GPU task*: it carries the Prefect tag `gpu`, holds
one slot of the global concurrency limit `gpu` (strict, sized to the visible GPUs, 1 on a CPU
machine) while it runs, and under the Dask runner is submitted with the Dask resource
annotation `GPU: 1`, which only workers advertising a `GPU` resource accept.
"""
from __future__ import annotations

import contextlib
import functools
import queue
import threading
from typing import Any, Callable, Iterator, Literal

from pydantic import Field

from paperline.config import StrictModel, section_file, validate
from paperline.train.distributed import DistributedConfig, DistributedError
from tasks.prefect_api import release_orphaned_slots

GPU_TAG = "gpu"
GPU_LIMIT = "gpu"


class RuntimeConfig(StrictModel):
    """`runtime:` in params/runtime.yaml: where the flows' tasks run."""

    task_runner: Literal["thread", "dask", "ray"] = "thread"
    max_workers: int = Field(2, ge=1, description="threads of the thread-pool runner")
    dask_workers: int = Field(2, ge=1, description="workers of the LocalCluster the Dask runner starts")
    dask_address: str | None = Field(None, description="scheduler of an existing Dask cluster")
    ray_workers: int = Field(2, ge=1, description="CPUs of the local Ray instance the Ray runner starts")
    ray_address: str | None = Field(None, description="an existing Ray cluster, e.g. ray://10.0.0.5:10001")
    # how one training spreads over devices (the LM trainings and SplashNet's Trainer read it)
    distributed: DistributedConfig = Field(default_factory=DistributedConfig)


def runtime_config(params: dict[str, Any]) -> RuntimeConfig:
    """`runtime:` of the parsed params files, validated (ParamsError names the key)."""
    from tasks.paths import params_path

    return validate(RuntimeConfig, params.get("runtime") or {}, f"{section_file('runtime', params_path())}: runtime")


def visible_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def gpu_slots() -> int:
    """Slots of the `gpu` limit: one per visible GPU, one on a CPU-only machine."""
    return max(1, visible_gpus())


def ensure_gpu_limit(slots: int | None = None) -> int:
    """Create (or resize) the global concurrency limit `gpu`; returns its size.

    On the temporary server a flow starts when no PREFECT_API_URL is set, slots still marked
    active belong to a process that died (SIGKILL): that server keeps leases in its memory, so
    they died with it and no lease expiry would ever free the slots. They are reset here, or a
    resumed run would wait forever. (Concurrent flows on one machine: run `make ui` and point
    PREFECT_API_URL at that server, whose leases expire.)
    """
    from prefect.client.orchestration import get_client
    from prefect.settings import get_current_settings

    slots = slots or gpu_slots()
    with get_client(sync_client=True) as client:
        client.upsert_global_concurrency_limit_by_name(GPU_LIMIT, slots)
        if get_current_settings().api.url is None:
            release_orphaned_slots(str(client.api_url).rstrip("/"))
    return slots


# GPUs free in this process. A concurrency slot says *that* a task may use a GPU, not *which*:
# the task takes an index from this pool for as long as it holds the slot.
_free_gpus: queue.SimpleQueue[int] | None = None
_free_gpus_lock = threading.Lock()


def _gpu_pool() -> queue.SimpleQueue[int]:
    global _free_gpus
    with _free_gpus_lock:
        if _free_gpus is None:
            _free_gpus = queue.SimpleQueue()
            for index in range(visible_gpus()):
                _free_gpus.put(index)
        return _free_gpus


# An in-process queue in front of the `gpu` limit. The server answers a denied slot with a
# Retry-After near the limit's mean occupancy (capped at 30 s), so a task polling it slept on for
# up to that long after a slot freed: ~17 s idle between two 30-s SplashNet trainings (measured).
# A process's tasks wait here instead and are woken at once; the Prefect limit still gates what
# several processes (flows, Dask workers) run at a time.
_local_gate: threading.BoundedSemaphore | None = None


def _gpu_gate() -> threading.BoundedSemaphore:
    global _local_gate
    with _free_gpus_lock:
        if _local_gate is None:
            _local_gate = threading.BoundedSemaphore(gpu_slots())
        return _local_gate


# A slot's lease, renewed by its holder every 0.75 of it. Prefect's default (300 s) kept the slot of
# a SIGKILLed run on a shared server (`make run`, `make ui`) for five minutes, and its resumed run
# waited that long (measured: 6:16 for the kill-and-resume test); the server's repossessor frees
# an expired lease within 15 s, so a resumed run now waits at most 75 s (60 s: the server's minimum).
SLOT_LEASE_SECONDS = 60.0


@contextlib.contextmanager
def gpu_slot() -> Iterator[Any]:
    """Hold a `gpu` slot and yield the torch device to use (CUDA when present, else CPU)."""
    with gpu_devices(1) as devices:
        yield devices[0]


def training_slots(devices: int) -> int:
    """`gpu` slots a training over `devices` holds: one per GPU, one on a CPU machine."""
    return devices if visible_gpus() else 1


# Taking several slots one by one, two tasks could each hold part of what the other waits for.
_several_slots = threading.Lock()


@contextlib.contextmanager
def gpu_devices(count: int = 1, where: str = "runtime.distributed.devices") -> Iterator[list[Any]]:
    """Hold `count` slots of the `gpu` limit and yield their torch devices: a training spread over
    several GPUs (runtime.distributed) holds one slot per GPU. On a CPU machine one slot and [cpu]:
    CPU processes share the machine's cores, they do not need a slot each."""
    import torch
    from prefect.concurrency.sync import concurrency

    gpus = visible_gpus()
    if gpus and count > gpus:
        raise DistributedError(f"{where}: {count} GPUs asked, {gpus} visible")
    slots = training_slots(count)
    gate = _gpu_gate()
    with _several_slots if slots > 1 else contextlib.nullcontext():
        for _ in range(slots):
            gate.acquire()
    try:
        with concurrency(GPU_LIMIT, occupy=slots, strict=True, lease_duration=SLOT_LEASE_SECONDS):
            if gpus == 0:
                yield [torch.device("cpu")]
                return
            pool = _gpu_pool()
            indices = [pool.get() for _ in range(slots)]
            try:
                yield [torch.device("cuda", i) for i in indices]
            finally:
                for i in indices:
                    pool.put(i)
    finally:
        for _ in range(slots):
            gate.release()


def _no_annotation(gpus: int) -> contextlib.AbstractContextManager[None]:
    return contextlib.nullcontext()


@functools.lru_cache(maxsize=None)
def gpu_annotation(runner_type: type) -> Callable[[int], contextlib.AbstractContextManager[Any]]:
    """How a GPU task asking for `gpus` devices is submitted under a task runner of this type,
    decided once per type: the Dask resource annotation, Ray's `num_gpus`, else as it is. By class
    name, so that neither prefect-dask nor prefect-ray is imported when the runner is not theirs."""
    name = runner_type.__name__
    if name == "DaskTaskRunner":
        import dask

        return lambda gpus: dask.annotate(resources={"GPU": gpus})
    if name == "RayTaskRunner":
        from prefect_ray.context import remote_options

        return lambda gpus: remote_options(num_gpus=gpus)
    return _no_annotation


def submit_gpu(task: Any, *args: Any, gpus: int = 1, **kwargs: Any) -> Any:
    """`task.submit(...)` for a GPU task, annotated for the flow's task runner (`gpus`: a training
    spread over several devices)."""
    from prefect.context import FlowRunContext

    if GPU_TAG not in task.tags:
        raise ValueError(f"task {task.name!r} is submitted as a GPU task but lacks the {GPU_TAG!r} tag")
    ctx = FlowRunContext.get()
    with (gpu_annotation(type(ctx.task_runner)) if ctx is not None else _no_annotation)(gpus):
        return task.submit(*args, **kwargs)


# Chunks of a prep stage's items per worker: enough to balance items of unequal cost (slides of
# different sizes), few enough that Prefect's ~40 ms a task stays small beside the work.
CHUNKS_PER_WORKER = 4


def parallelism(runtime: RuntimeConfig) -> int:
    """Tasks the configured runner runs at once."""
    return {"thread": runtime.max_workers, "dask": runtime.dask_workers, "ray": runtime.ray_workers}[runtime.task_runner]


def chunk_mapper(runtime: RuntimeConfig, *tasks: Any) -> Any:
    """A `map_chunks` (paperline/data/chunks.py) that runs each chunk of items as a Prefect task on
    the flow's task runner: the task among `tasks` that wraps the function the stage maps. It waits
    for every chunk before returning or raising, so a failed chunk never leaves another one writing
    into a folder the stage is about to discard."""
    from prefect.futures import wait

    from paperline.data.chunks import split_chunks

    by_function = {t.fn: t for t in tasks}
    chunks = parallelism(runtime) * CHUNKS_PER_WORKER

    def map_chunks(fn: Any, items: list, **kwargs: Any) -> list:
        futures = [by_function[fn].submit(chunk, **kwargs) for chunk in split_chunks(items, chunks)]
        wait(futures)
        return [result for future in futures for result in future.result()]

    return map_chunks


def make_task_runner(runtime: RuntimeConfig) -> Any:
    if runtime.task_runner == "thread":
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner(max_workers=runtime.max_workers)
    if runtime.task_runner == "ray":
        return _ray_task_runner(runtime)
    from prefect_dask import DaskTaskRunner

    if runtime.dask_address:
        return DaskTaskRunner(address=runtime.dask_address)
    # Each worker advertises as many GPU slots as this machine has GPUs per worker (1 on a
    # CPU machine), so GPU-annotated tasks run one per worker slot.
    per_worker = max(1, visible_gpus() // runtime.dask_workers)
    return DaskTaskRunner(
        cluster_kwargs={
            "n_workers": runtime.dask_workers,
            "threads_per_worker": 1,
            "resources": {"GPU": per_worker},
            "dashboard_address": None,
        }
    )


def _ray_task_runner(runtime: RuntimeConfig) -> Any:
    """prefect-ray's RayTaskRunner: on `ray_address`'s cluster, whose GPUs are its own, or on a
    local Ray instance of `ray_workers` CPUs. The local one declares as many GPUs as are visible,
    and one on a CPU machine, so that GPU tasks (`num_gpus=1`) run one at a time as with the other
    runners rather than never being scheduled."""
    from prefect_ray import RayTaskRunner

    if runtime.ray_address:
        return RayTaskRunner(address=runtime.ray_address)
    return RayTaskRunner(init_kwargs={
        "num_cpus": runtime.ray_workers,
        "num_gpus": gpu_slots(),
        "include_dashboard": False,
        "log_to_driver": False,
    })
