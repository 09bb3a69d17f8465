"""GPU-tagged tasks hold the strict `gpu` limit (1 slot here) and never overlap; CPU tasks do."""
from __future__ import annotations

import time

import pytest
from prefect import flow, task
from prefect.task_runners import ThreadPoolTaskRunner

from tasks.runners import GPU_TAG, RuntimeConfig, ensure_gpu_limit, gpu_slot, gpu_slots, make_task_runner, submit_gpu


@task(tags=[GPU_TAG])
def gpu_work(seconds: float) -> tuple[float, float, str]:
    with gpu_slot() as device:
        start = time.monotonic()
        time.sleep(seconds)
        return start, time.monotonic(), device.type


@task
def cpu_work(seconds: float) -> tuple[float, float]:
    start = time.monotonic()
    time.sleep(seconds)
    return start, time.monotonic()


@flow(task_runner=ThreadPoolTaskRunner(max_workers=6))
def mixed_flow() -> tuple[list, list]:
    assert ensure_gpu_limit() == gpu_slots() == 1  # a CPU machine: one slot
    gpu = [submit_gpu(gpu_work, 0.6) for _ in range(3)]
    cpu = [cpu_work.submit(0.6) for _ in range(3)]
    return [f.result() for f in gpu], [f.result() for f in cpu]


def _overlap(a, b) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def test_gpu_tasks_never_overlap_while_cpu_tasks_do(prefect_server):
    gpu, cpu = mixed_flow()
    assert all(device == "cpu" for *_, device in gpu)
    assert not any(_overlap(a, b) for i, a in enumerate(gpu) for b in gpu[i + 1:])
    assert all(_overlap(a, b) for i, a in enumerate(cpu) for b in cpu[i + 1:])


def test_untagged_task_is_refused_as_gpu_task():
    with pytest.raises(ValueError, match="lacks the 'gpu' tag"):
        submit_gpu(cpu_work, 0.0)


def test_task_runner_choice():
    from prefect_dask import DaskTaskRunner

    assert isinstance(make_task_runner(RuntimeConfig()), ThreadPoolTaskRunner)
    dask_runner = make_task_runner(RuntimeConfig(task_runner="dask", dask_workers=2))
    assert isinstance(dask_runner, DaskTaskRunner)
    assert dask_runner.cluster_kwargs["resources"] == {"GPU": 1}
    from prefect_ray import RayTaskRunner

    ray_runner = make_task_runner(RuntimeConfig(task_runner="ray", ray_workers=3))
    assert isinstance(ray_runner, RayTaskRunner) and ray_runner.address is None
    # a CPU machine declares one logical GPU, or `num_gpus=1` tasks would never be scheduled
    assert (ray_runner.init_kwargs["num_cpus"], ray_runner.init_kwargs["num_gpus"]) == (3, 1)
    assert make_task_runner(RuntimeConfig(task_runner="ray", ray_address="ray://10.0.0.5:10001")).address \
        == "ray://10.0.0.5:10001"


def test_runtime_distributed_is_read_and_checked_before_a_run():
    from paperline.config import ParamsError
    from tasks.runners import runtime_config

    cfg = runtime_config({"runtime": {"distributed": {"strategy": "ddp", "devices": 2}}})
    assert cfg.distributed.strategy == "ddp" and cfg.distributed.devices == 2 and cfg.task_runner == "thread"
    with pytest.raises(ParamsError, match=r"runtime.*distributed.*strategy"):
        runtime_config({"runtime": {"distributed": {"strategy": "pipeline"}}})
    with pytest.raises(ParamsError, match=r"runtime.*distributed.*device"):
        runtime_config({"runtime": {"distributed": {"device": 2}}})  # a misspelt key


@task(tags=[GPU_TAG])
def two_device_work() -> list[str]:
    from tasks.runners import gpu_devices

    with gpu_devices(2) as devices:
        return [str(d) for d in devices]


@flow(task_runner=ThreadPoolTaskRunner(max_workers=2))
def two_device_flow() -> list[str]:
    ensure_gpu_limit()
    return submit_gpu(two_device_work, gpus=2).result()


def test_a_training_over_several_cpu_processes_holds_one_slot(prefect_server):
    from tasks.runners import training_slots

    assert training_slots(2) == 1  # CPU processes share the cores; a GPU machine holds one slot per device
    assert two_device_flow() == ["cpu"]
