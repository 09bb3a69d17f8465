"""Run a method's flow with parameters validated before any work starts (served: flows/dvc_run.py).

Only a DVC stage writes the workspace's versioned outputs (models/, metrics/, results/, plots/, runs/
of the method). `python -m flows run <method>` outside DVC writes them to a scratch folder of its own
(`scratch/<method>-<time>/`, the same layout, ignored by git and DVC); `--in-place` writes the
workspace's, with the parameters the params files name only, else it shows the `dvc exp run` that runs
those parameters versioned. The inputs (the params files, prepared data, upstream models) are the
workspace's either way (tasks/paths.py)."""
from __future__ import annotations

import contextlib
import logging
import os
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

from flows import get_method
from flows.lineage import run_linked
from paperline.config import ParamsError, load_method_config, parse_override, read_params, section_file
from paperline.io import DataError
from tasks.paths import OUTPUT_ROOT_ENV, params_path, repo_path, repo_root
from tasks.runners import make_task_runner, runtime_config
from tasks.track import dvc_experiment

SCRATCH = "scratch"  # in .gitignore and .dvcignore
_HYDRA_KEY = re.compile(r"[A-Za-z_][\w-]*")


def resolve(method: str, profile: str | None = None, overrides: Sequence[str] = ()):
    """(profile, config) of a method from params/<method>.yaml; raises ParamsError naming the key."""
    spec = get_method(method)
    return load_method_config(spec.load_config_model(), read_params(params_path()), method,
                              profile, overrides, source=params_path().name, root=repo_root())


def is_default_run(method: str, profile: str | None, overrides: Sequence[str]) -> bool:
    """Whether these are the parameters params/<method>.yaml names (its profile for the method, no
    override): what `dvc repro <method>` runs. Validates them (ParamsError names the key)."""
    default_profile, _ = resolve(method)
    chosen, _ = resolve(method, profile, overrides)
    return chosen == default_profile and not overrides


@contextlib.contextmanager
def _outputs_under(outputs: Path | None) -> Iterator[None]:
    if outputs is None:
        yield
        return
    before = os.environ.get(OUTPUT_ROOT_ENV)
    # the environment, so that worker processes (Dask, Ray, Flower) write there too
    os.environ[OUTPUT_ROOT_ENV] = str(outputs)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(OUTPUT_ROOT_ENV, None)
        else:
            os.environ[OUTPUT_ROOT_ENV] = before


class _NoTracebackForBadInput(logging.Filter):
    """Prefect logs a failed flow's exception with its traceback; a bad input (refused by the flow's
    data step before any work) is a usage error whose message names the file: the caller prints that
    one line, so the traceback goes."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], (DataError, ParamsError, FileNotFoundError)):
            record.exc_info, record.exc_text = None, None
        return True


@contextlib.contextmanager
def _bad_input_without_traceback() -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in ("prefect.flow_runs", "prefect.task_runs")]
    only = _NoTracebackForBadInput()
    for logger in loggers:
        logger.addFilter(only)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(only)


def run_method(method: str, profile: str | None = None, overrides: Sequence[str] = (),
               outputs: Path | None = None) -> Any:
    """Run the method's flow; its outputs go under `outputs` (models/, metrics/, results/, plots/,
    runs/ as in the workspace), None: the workspace's."""
    params = read_params(params_path())
    runtime = runtime_config(params)
    profile, _ = resolve(method, profile, overrides)  # fail here, before Prefect starts
    flow = get_method(method).load_flow().with_options(task_runner=make_task_runner(runtime))
    try:
        with _outputs_under(outputs), _bad_input_without_traceback():
            return run_linked(flow, profile=profile, overrides=list(overrides))
    except (DataError, ParamsError, FileNotFoundError):
        if outputs is not None:
            _remove_empty_scratch(outputs)  # refused before any work: leave nothing behind
        raise


def _remove_empty_scratch(outputs: Path) -> None:
    """Remove a scratch run folder that nothing was written to, and scratch/ if that leaves it empty."""
    scratch = repo_path(SCRATCH)
    for folder in (outputs, scratch):
        if folder.resolve().is_relative_to(scratch.resolve()) and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


def hydra_value(key: str, value: Any) -> str:
    """`value` (an override's YAML value) in Hydra's override grammar, which `dvc exp run -S`
    parses: strings quoted so they stay strings whatever they look like."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)  # 1e-05, inf and nan are Hydra floats too
    if isinstance(value, str):
        if "${" in value:  # Hydra would resolve it as an interpolation
            raise ParamsError(f"override {key!r}: '${{' cannot be passed to a DVC experiment")
        # a backslash escapes only a quote or the backslashes before one (Hydra's quoted strings)
        escaped = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", value)
        escaped = re.sub(r"(\\+)$", lambda m: m.group(1) * 2, escaped)
        return f"'{escaped}'"
    if isinstance(value, list):
        return "[" + ",".join(hydra_value(key, item) for item in value) + "]"
    if isinstance(value, dict):
        bad = [k for k in value if not (isinstance(k, str) and _HYDRA_KEY.fullmatch(k))]
        if bad:
            raise ParamsError(f"override {key!r}: mapping key {bad[0]!r} cannot be passed to a DVC experiment")
        return "{" + ",".join(f"{k}:{hydra_value(key, v)}" for k, v in value.items()) + "}"
    raise ParamsError(f"override {key!r}: a {type(value).__name__} value cannot be passed to a DVC experiment")


def experiment_params(method: str, profile: str, overrides: Sequence[str]) -> list[str]:
    """`-S` arguments setting the method's profile and each override in that profile's section, in
    DVC's file-qualified form `params/<method>.yaml:<key>=<value>` (the section's own file, not
    DVC's default params.yaml); `++` adds a key the file lacks (a model default) as well as
    replacing one it has."""
    file = section_file(method)
    args = ["-S", f"{file}:{method}.profile={profile}"]
    for text in overrides:
        key, value = parse_override(text)
        args += ["-S", f"{file}:++{method}.profiles.{profile}.{key}={hydra_value(key, value)}"]
    return args


def experiment_command(method: str, profile: str | None, overrides: Sequence[str],
                       name: str | None = None) -> list[str]:
    """`dvc exp run --temp [-n name] -S ... <method>`: the method with `profile` (None: the one
    params/<method>.yaml names) and `overrides` as a DVC experiment in a temporary copy of the repository."""
    profile, _ = resolve(method, profile, overrides)
    return [dvc_executable(), "exp", "run", "--temp", *(["-n", name] if name else []),
            *experiment_params(method, profile, overrides), method]


def dvc_executable() -> str:
    beside = Path(sys.executable).parent / "dvc"  # the venv's, wherever PATH points
    return str(beside) if beside.exists() else "dvc"


def scratch_dir(method: str) -> Path:
    """A new folder `scratch/<method>-<time>/` of the project for one run's outputs."""
    stem = repo_path(SCRATCH, f"{method}-{time.strftime('%Y%m%d-%H%M%S')}")
    for n in range(1, 1000):
        path = stem if n == 1 else stem.with_name(f"{stem.name}-{n}")
        try:
            path.mkdir(parents=True)  # exclusive: two runs started in one second get two folders
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"{stem}: no free scratch folder name")


def cli_outputs(method: str, profile: str | None, overrides: Sequence[str], in_place: bool = False,
                out: str | None = None) -> Path | None:
    """Where `python -m flows run` writes a method's outputs; None: the workspace's. Inside a DVC
    stage (dvc repro, dvc exp run) and with `in_place` (the params files' parameters only, else a
    ParamsError showing the DVC experiment that runs these parameters versioned), the workspace;
    else `out` (a killed run's folder resumes from its checkpoints) or a new scratch folder."""
    default = is_default_run(method, profile, overrides)  # a bad key fails before anything is made
    if dvc_experiment() != "none":  # DVC sets DVC_STAGE for every stage command it runs
        if out:
            raise ParamsError("--out: a DVC stage writes its outputs where dvc.yaml says")
        return None
    if in_place:
        if not default:
            raise ParamsError(
                f"--in-place writes the workspace's versioned outputs, so only with the parameters "
                f"{section_file(method)} names ({method}.profile={resolve(method)[0]}, no --set). The same "
                f"run, versioned, as a DVC experiment in a temporary copy (`dvc exp show` lists it):\n"
                f"  {shlex.join(experiment_command(method, profile, overrides))}")
        return None
    if out:
        path = Path(out).expanduser()
        path.mkdir(parents=True, exist_ok=True)
        return path.resolve()
    return scratch_dir(method)


def describe_outputs(outputs: Path) -> str:
    """Where a run outside DVC writes and, once it has, what, for the terminal."""
    try:
        shown = outputs.relative_to(Path.cwd())
    except ValueError:
        shown = outputs
    written = sorted(p.relative_to(outputs).as_posix() for p in outputs.glob("*/*"))
    return (f"outside DVC: this run's outputs {'are in' if written else 'go to'} {shown}/"
            f"{' (' + ', '.join(written) + ')' if written else ''}; "
            f"the workspace's versioned outputs are left as they are (--in-place writes them)")
