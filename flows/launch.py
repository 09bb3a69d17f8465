"""Run a method's flow, or serve them all, with parameters validated before any work starts."""
from __future__ import annotations

from typing import Any, Sequence

from flows import METHODS, get_method
from flows.lineage import run_linked
from paperline.config import load_method_config, read_params, validate
from tasks.paths import params_path
from tasks.runners import RuntimeConfig, make_task_runner


def runtime_config(params: dict[str, Any]) -> RuntimeConfig:
    return validate(RuntimeConfig, params.get("runtime") or {}, f"{params_path().name}: runtime")


def resolve(method: str, profile: str | None = None, overrides: Sequence[str] = ()):
    """(profile, config) of a method from params.yaml; raises ParamsError naming the key."""
    spec = get_method(method)
    return load_method_config(spec.load_config_model(), read_params(params_path()), method,
                              profile, overrides, source=params_path().name)


def run_method(method: str, profile: str | None = None, overrides: Sequence[str] = ()) -> Any:
    params = read_params(params_path())
    runtime = runtime_config(params)
    profile, _ = resolve(method, profile, overrides)  # fail here, before Prefect starts
    flow = get_method(method).load_flow().with_options(task_runner=make_task_runner(runtime))
    return run_linked(flow, profile=profile, overrides=list(overrides))


def deployments() -> list[Any]:
    """Every flow as a Prefect deployment with its cron schedule and default parameters."""
    params = read_params(params_path())
    runtime = runtime_config(params)
    out = []
    for name, spec in METHODS.items():
        profile, _ = resolve(name)
        section = params[name]
        flow = spec.load_flow().with_options(task_runner=make_task_runner(runtime))
        out.append(flow.to_deployment(
            name=f"{name}-{profile}",
            cron=section.get("schedule"),
            parameters={"profile": profile, "overrides": []},
            description=spec.title,
            tags=["paperline", name],
        ))
    return out


def serve_all() -> None:
    from prefect import serve

    serve(*deployments(), pause_on_shutdown=False)
