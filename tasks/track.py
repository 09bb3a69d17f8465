"""MLflow tracking: one experiment per method, a parent run per flow run, a child run per variant.

Runs go to `sqlite:///<repo>/mlflow.db` with artifacts in `<repo>/mlartifacts/` unless
MLFLOW_TRACKING_URI says otherwise. Everything goes through `MlflowClient` with explicit run ids:
the fluent API keeps its active run per thread, which breaks inside threaded tasks.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from tasks.paths import code_root, repo_path, repo_root

STEP_BATCH = 1000  # MLflow accepts at most 1000 metrics per log_batch call


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{repo_path('mlflow.db')}"


def client():
    return _client(tracking_uri())


@functools.lru_cache(maxsize=4)
def _client(uri: str):
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    from mlflow.tracking import MlflowClient

    return MlflowClient(uri)


def dvc_experiment() -> str:
    """The DVC experiment this process runs in: its name under `dvc exp run` (DVC sets
    DVC_EXP_NAME for the stage commands), `repro` under a plain `dvc repro` (DVC sets DVC_STAGE
    for every stage command), `none` outside DVC."""
    return os.environ.get("DVC_EXP_NAME") or ("repro" if os.environ.get("DVC_STAGE") else "none")


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=code_root(), capture_output=True,
                             text=True, timeout=10, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def data_version(paths: Iterable[str | os.PathLike] = ()) -> str:
    """sha256 over the input files (sorted, recursive); 'generated' when a method reads no files
    (its data is made in-process from the config, which is logged as parameters)."""
    files = sorted(p for path in map(Path, paths)
                   for p in ([path] if path.is_file() else path.rglob("*")) if p.is_file())
    if not files:
        return "generated"
    digest = hashlib.sha256()
    for f in files:
        digest.update(str(f.relative_to(repo_root()) if f.is_relative_to(repo_root()) else f).encode())
        digest.update(f.read_bytes())
    return "sha256:" + digest.hexdigest()[:16]


def experiment_id(method: str) -> str:
    c = client()
    exp = c.get_experiment_by_name(method)
    if exp is not None:
        return exp.experiment_id
    kwargs = {}
    if tracking_uri().startswith("sqlite:///"):
        # beside the database, never in the stage's working copy: `dvc exp run --temp` runs the
        # stage in a temporary copy of the repository and deletes it afterwards
        database = Path(tracking_uri().removeprefix("sqlite:///")).resolve()
        kwargs["artifact_location"] = (database.parent / "mlartifacts" / method).as_uri()
    try:
        return c.create_experiment(method, **kwargs)
    except Exception:  # created meanwhile by another process
        exp = c.get_experiment_by_name(method)
        if exp is None:
            raise
        return exp.experiment_id


def _flatten(prefix: str, value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from _flatten(f"{prefix}.{k}" if prefix else str(k), v)
    else:
        yield prefix, value


@dataclass(frozen=True)
class Run:
    """An MLflow run addressed by id (picklable: safe to pass to Dask workers)."""

    run_id: str
    experiment_id: str

    def log_params(self, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)[:6000]) for k, v in _flatten("", params)]
        for i in range(0, len(items), 100):
            client().log_batch(self.run_id, params=items[i:i + 100])

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k, float(v), now, step or 0) for k, v in _flatten("", metrics)
                 if isinstance(v, (int, float)) and not isinstance(v, bool)]
        for i in range(0, len(items), STEP_BATCH):
            client().log_batch(self.run_id, metrics=items[i:i + STEP_BATCH])

    def log_history(self, key: str, steps: Iterable[int], values: Iterable[float]) -> None:
        """A per-step metric curve, in batches."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(key, float(v), now, int(s)) for s, v in zip(steps, values)]
        for i in range(0, len(items), STEP_BATCH):
            client().log_batch(self.run_id, metrics=items[i:i + STEP_BATCH])

    def log_artifact(self, path: str | os.PathLike, artifact_path: str | None = None) -> None:
        client().log_artifact(self.run_id, str(path), artifact_path)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        for k, v in tags.items():
            client().set_tag(self.run_id, k, str(v))


def _tags(method: str, variant: str, profile: str, data: str) -> dict[str, str]:
    return {"method": method, "variant": variant, "profile": profile,
            "git_commit": git_commit(), "data_version": data, "dvc_experiment": dvc_experiment()}


@contextlib.contextmanager
def _terminating(run: Run) -> Iterator[Run]:
    """FINISHED when the block ends normally, FAILED when it raises (or is interrupted)."""
    try:
        yield run
    except BaseException:
        client().set_terminated(run.run_id, "FAILED")
        raise
    client().set_terminated(run.run_id, "FINISHED")


@contextlib.contextmanager
def parent_run(method: str, profile: str, params: Mapping[str, Any], data: str) -> Iterator[Run]:
    exp = experiment_id(method)
    created = client().create_run(exp, run_name=f"{method}-{profile}-{time.strftime('%Y%m%d-%H%M%S')}",
                                  tags=_tags(method, "all", profile, data))
    run = Run(created.info.run_id, exp)
    run.log_params(params)
    with _terminating(run):
        yield run


@contextlib.contextmanager
def child_run(parent: Run, method: str, variant: str, profile: str, data: str,
              params: Mapping[str, Any] | None = None) -> Iterator[Run]:
    tags = _tags(method, variant, profile, data) | {"mlflow.parentRunId": parent.run_id}
    created = client().create_run(parent.experiment_id, run_name=variant, tags=tags)
    run = Run(created.info.run_id, parent.experiment_id)
    if params:
        run.log_params(params)
    with _terminating(run):
        yield run


def run_pointer(run: Run, method: str) -> dict[str, str]:
    """What `mlflow_run.json` holds, so `dvc.lock` names the MLflow run."""
    return {"run_id": run.run_id, "experiment": method, "experiment_id": run.experiment_id,
            "tracking_uri": tracking_uri()}


def fail_if_running(run_id: str | None) -> bool:
    """Mark a run that died without ending (SIGKILL, power loss) FAILED, with its children."""
    if not run_id:
        return False
    c = client()
    try:
        run = c.get_run(run_id)
    except Exception:
        return False
    if run.info.status != "RUNNING":
        return False
    children = c.search_runs([run.info.experiment_id],
                             filter_string=f"tags.mlflow.parentRunId = '{run_id}'")
    for child in children:
        if child.info.status == "RUNNING":
            c.set_terminated(child.info.run_id, "FAILED")
    c.set_terminated(run_id, "FAILED")
    return True
