"""The skeleton every method flow runs inside, written once:

    @flow(name="dnc", log_prints=True)
    def dnc_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
        with method_run(METHOD, profile, overrides) as run:
            futures = [submit_gpu(train_group, run.cfg, K, L, run.context) for ...]
            return run.publish(report.submit(run.cfg, [f.result() for f in futures], run.context))

`method_run`, in this order:
1. resolves and validates the parameters (a bad key fails here, before any work);
2. prepares or checks the method's data (`data(cfg)`, returning the data object the tasks take, with
   a `version`; no `data` means the method makes its data from the config: version "generated"), so
   a refused input fails before the run directory below is touched (a changed configuration would
   clear it: the previous run's checkpoints, a DVC output);
3. sizes the `gpu` concurrency limit to the visible GPUs;
4. opens `models/<method>/`: a run of the same configuration that died resumes from its
   checkpoints (its MLflow runs, left RUNNING, are marked FAILED), anything else starts afresh;
5. opens the parent MLflow run (params, tags, data version as a dataset) and records it in the run
   directory;
then the flow body runs its tasks and must call `run.publish(report)` (tasks.publish): leaving the
block without publishing is an error, so a flow cannot end without its metrics or leave its MLflow
run RUNNING. After the block the run directory is marked complete (a later run starts afresh).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from flows.launch import resolve
from paperline.config import read_params
from paperline.train.distributed import DistributedConfig
from tasks import track
from tasks.paths import params_path
from tasks.publish import Report, publish
from tasks.resume import RunDir, open_run_dir
from tasks.runners import ensure_gpu_limit, runtime_config, training_slots


@dataclass
class MethodRun:
    method: str
    profile: str
    cfg: Any
    data: Any
    context: track.RunContext
    run_dir: RunDir
    # params/runtime.yaml `runtime.distributed`: how a training task spreads over devices (the tasks that
    # take it; `gpus` is the `gpu` slots such a task holds, for submit_gpu's runner annotations)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    published: dict | None = field(default=None, init=False)

    @property
    def gpus(self) -> int:
        return training_slots(self.distributed.devices)

    @property
    def models_dir(self) -> Path:
        return self.run_dir.path

    def publish(self, report: Any) -> dict:
        """Publish the method's Report (or a future of one); returns the metrics record."""
        self.published = publish(self.context, report.result() if hasattr(report, "result") else report)
        from flows import METHODS  # the registry: the method's title and its paper

        spec = METHODS[self.method]
        track.describe(self.context.parent, spec.title, spec.paper, f"docs/methods/{self.method}.md",
                       self.published.get("claims", []))
        return self.published


def _version(data: Any) -> str:
    if data is None:
        return track.data_version()
    return data if isinstance(data, str) else data.version


@contextlib.contextmanager
def method_run(method: str, profile: str | None, overrides: Sequence[str] | None,
               data: Callable[[Any], Any] | None = None,
               run_config: Callable[[Any], dict] | None = None) -> Iterator[MethodRun]:
    """`run_config(cfg)`: what identifies the run for resuming and is logged as parameters, when it
    is more than the method's own config (ZTSurv adds the WSI prep parameters)."""
    profile, cfg = resolve(method, profile, list(overrides or []))
    distributed = runtime_config(read_params(params_path())).distributed
    prepared = data(cfg) if data else None
    version = _version(prepared)
    ensure_gpu_limit()
    config = {"profile": profile, **(run_config(cfg) if run_config else cfg.model_dump())}
    run_dir = open_run_dir(method, config)
    if run_dir.resumed and track.fail_if_running(run_dir.previous_parent_run):
        print(f"previous run {run_dir.previous_parent_run} died; resuming from its checkpoints")
    with track.parent_run(method, profile, config, version) as parent:
        run_dir.record_parent(parent.run_id)
        run = MethodRun(method, profile, cfg, prepared, track.RunContext(method, profile, version, parent), run_dir,
                        distributed)
        yield run
        if run.published is None:
            raise RuntimeError(f"the {method} flow ended without publishing its report (call run.publish)")
    run_dir.mark_complete()


__all__ = ["MethodRun", "Report", "method_run"]
