"""The Prefect deployments `python -m flows serve` registers: every run goes through DVC.

- `dvc-stage/<method>` with the defaults runs `dvc repro <method>` (its upstream data stages
  included): the workspace's outputs and `dvc.lock` move to the new version, as after `make run`.
- The same deployment with parameters (another profile, `key=value` overrides) runs a DVC
  experiment in a temporary copy of the repository, `dvc exp run --temp -S ...`: it shows in
  `dvc exp show` with its params and metrics and never touches the workspace.
- `dvc-pipeline/pipeline` runs `dvc repro`, the whole pipeline.

Parameters are validated with the CLI's resolver before DVC starts, so a bad key fails the run at
once with the CLI's message. One DVC-launching run at a time: the DVC task holds a slot of the
strict global concurrency limit `dvc` (size 1); see docs/running.md.
"""
from __future__ import annotations

import collections
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal, Sequence

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from flows import METHODS
from flows.launch import (
    dvc_executable,
    experiment_command,
    hydra_value,  # noqa: F401 (tests/test_serve.py imports it from here)
    is_default_run,
    resolve,
)
from flows.lineage import parent_env
from paperline.config import PROFILES, ParamsError, StrictModel, read_params, section_file, validate
from tasks.paths import params_path, repo_root
from tasks.runners import SLOT_LEASE_SECONDS  # the dvc slot is leased like a gpu slot
from tasks.track import tracking_uri

DVC_LIMIT = "dvc"
PIPELINE_SECTION = "pipeline"
_ERROR_TAIL = 30  # lines of DVC's output a failed run's message quotes
ProfileName = Literal[PROFILES]  # a drop-down in the Prefect UI
# A line Prefect's console handler wrote in a stage's flow: that flow run sent it to the API
# already, under its own run (a subflow of this one), so it is not logged twice.
_PREFECT_CONSOLE_LINE = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} \| [A-Z]+ +\| ")


class PipelineConfig(StrictModel):
    """`pipeline:` in params/pipeline.yaml: the whole pipeline's deployment (no stage reads it)."""

    schedule: str | None = None


def pipeline_config(params: dict[str, Any]) -> PipelineConfig:
    return validate(PipelineConfig, params.get(PIPELINE_SECTION) or {},
                    f"{section_file(PIPELINE_SECTION, params_path())}: {PIPELINE_SECTION}")


def dvc_command(method: str, profile: str | None, overrides: Sequence[str],
                run_name: str) -> tuple[list[str], str]:
    """(command, experiment name) of a deployment run, after validating its parameters as the CLI
    does (ParamsError names the key): `dvc repro <method>` (experiment `repro`) for the defaults,
    else a DVC experiment named `<method>-<profile>-<run_name>`."""
    if method not in METHODS:
        raise ParamsError(f"unknown method {method!r}; known: {', '.join(METHODS)}")
    if is_default_run(method, profile, overrides):
        return [dvc_executable(), "repro", method], "repro"
    profile, _ = resolve(method, profile, overrides)
    experiment = re.sub(r"[^A-Za-z0-9_-]+", "-", f"{method}-{profile}-{run_name}")  # a git ref name
    return experiment_command(method, profile, overrides, experiment), experiment


def _absolute_tracking_uri() -> str:
    """The tracking URI with a relative SQLite path made absolute: a DVC experiment runs its stage
    in a temporary copy, where a relative path would name a database DVC deletes."""
    uri = tracking_uri()
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri.startswith(prefix + "/"):
        return prefix + str(Path(uri.removeprefix(prefix)).resolve())
    return uri


def ensure_dvc_limit() -> None:
    """Create (or reset to size 1) the global concurrency limit that serializes DVC runs."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectAlreadyExists

    with get_client(sync_client=True) as client:
        try:
            client.upsert_global_concurrency_limit_by_name(DVC_LIMIT, 1)
        except ObjectAlreadyExists:  # another run created it between the upsert's read and write
            pass


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass


@task(name="dvc", cache_policy=NO_CACHE)
def run_dvc(command: list[str]) -> None:
    """Run `command` in the workspace holding the `dvc` slot, DVC's output in this run's logs;
    a non-zero exit fails the run with the end of that output."""
    from prefect.concurrency.sync import concurrency

    logger = get_run_logger()
    env = os.environ | parent_env() | {
        "MLFLOW_TRACKING_URI": _absolute_tracking_uri(),
        # stage commands call `python`: the interpreter serving these flows
        "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
    }
    logger.info("waiting for the %r concurrency slot (one DVC run at a time)", DVC_LIMIT)
    with concurrency(DVC_LIMIT, occupy=1, strict=True, lease_duration=SLOT_LEASE_SECONDS):
        logger.info("$ %s", " ".join(command))
        tail: collections.deque[str] = collections.deque(maxlen=_ERROR_TAIL)
        # a process group of its own, so that a cancelled run can stop DVC and its stage as a
        # Ctrl-C does (DVC ignores SIGINT itself while a stage runs)
        process = subprocess.Popen(command, cwd=repo_root(), env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, bufsize=1, start_new_session=True)
        try:
            for line in process.stdout:
                line = line.rstrip()
                tail.append(line)
                if not _PREFECT_CONSOLE_LINE.match(line):
                    logger.info("%s", line)
            returncode = process.wait()
        except BaseException:  # cancelled or crashed: let DVC clean up as after Ctrl-C
            _signal_group(process, signal.SIGINT)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                _signal_group(process, signal.SIGKILL)
            raise
    if returncode != 0:
        errors = [line for line in tail if line.startswith("ERROR")]
        raise RuntimeError(f"`{' '.join(command)}` exited with {returncode}:\n"
                           + "\n".join(errors or list(tail)))


@flow(name="dvc-stage", log_prints=True)
def dvc_stage(method: str, profile: ProfileName | None = None,
              overrides: list[str] | None = None) -> dict:
    """Run one method through DVC: `dvc repro <method>` with the defaults (profile empty or the one
    its params file names, no overrides), else a DVC experiment with `profile` and the `key=value`
    overrides of that profile's keys."""
    from prefect.runtime import flow_run

    run_name = f"{flow_run.get_name()}-{str(flow_run.get_id())[:6]}"  # names are not unique
    command, experiment = dvc_command(method, profile, list(overrides or []), run_name)
    ensure_dvc_limit()
    run_dvc(command)
    if experiment != "repro":
        print(f"DVC experiment {experiment!r}: see `dvc exp show`; its MLflow runs are tagged "
              f"dvc_experiment={experiment!r} in the MLflow experiment {method!r}")
    return {"method": method, "dvc_experiment": experiment, "command": command}


@flow(name="dvc-pipeline", log_prints=True)
def dvc_pipeline() -> dict:
    """`dvc repro`: every stage whose code, data or parameters changed, in the workspace."""
    command = [dvc_executable(), "repro"]
    ensure_dvc_limit()
    run_dvc(command)
    return {"dvc_experiment": "repro", "command": command}


def deployments() -> list[Any]:
    """A deployment per method (`dvc-stage/<method>`) and one for the whole pipeline
    (`dvc-pipeline/pipeline`), each with its cron schedule from its params file."""
    params = read_params(params_path())
    out = []
    for name, spec in METHODS.items():
        resolve(name)  # a broken section fails `serve`, not the first scheduled run
        out.append(dvc_stage.to_deployment(
            name=name,
            cron=params[name].get("schedule"),
            parameters={"method": name, "profile": None, "overrides": []},
            description=f"{spec.title}. Defaults: `dvc repro {name}`; with a profile or "
                        "overrides: a DVC experiment (`dvc exp show`).",
            tags=["paperline", name],
        ))
    out.append(dvc_pipeline.to_deployment(
        name="pipeline",
        cron=pipeline_config(params).schedule,
        description="`dvc repro`: the whole pipeline, every stage that changed.",
        tags=["paperline", "pipeline"],
    ))
    return out


def serve_all() -> None:
    from prefect import serve
    from prefect.settings import get_current_settings

    from flows.prefect_server import is_healthy

    # schedules fire only on a long-lived server; a temporary one would take them to its grave
    url = get_current_settings().api.url
    if not url or not is_healthy(str(url).rstrip("/")):
        raise SystemExit(f"no Prefect server answers at {url or '(PREFECT_API_URL unset)'}: "
                         "start one (`make ui`) and point PREFECT_API_URL at it (`make serve` does)")
    ensure_dvc_limit()
    serve(*deployments(), pause_on_shutdown=False)
