"""Run a method's flow with parameters validated before any work starts (served: flows/dvc_run.py)."""
from __future__ import annotations

from typing import Any, Sequence

from flows import get_method
from flows.lineage import run_linked
from paperline.config import load_method_config, read_params
from tasks.paths import params_path, repo_root
from tasks.runners import make_task_runner, runtime_config


def resolve(method: str, profile: str | None = None, overrides: Sequence[str] = ()):
    """(profile, config) of a method from params.yaml; raises ParamsError naming the key."""
    spec = get_method(method)
    return load_method_config(spec.load_config_model(), read_params(params_path()), method,
                              profile, overrides, source=params_path().name, root=repo_root())


def run_method(method: str, profile: str | None = None, overrides: Sequence[str] = ()) -> Any:
    params = read_params(params_path())
    runtime = runtime_config(params)
    profile, _ = resolve(method, profile, overrides)  # fail here, before Prefect starts
    flow = get_method(method).load_flow().with_options(task_runner=make_task_runner(runtime))
    return run_linked(flow, profile=profile, overrides=list(overrides))
