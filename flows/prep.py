"""Run a data-prep stage's flow (`python -m flows run <stage>`), its parameters validated before
Prefect starts, on the task runner `runtime:` in params/runtime.yaml names."""
from __future__ import annotations

from typing import Any, Sequence

from flows import get_prep_stage
from flows.lineage import run_linked
from paperline.config import ParamsError, load_data_config, load_method_config, load_section_config, read_params
from paperline.data.chunks import ChunkMap
from tasks.paths import params_path
from tasks.runners import chunk_mapper, make_task_runner, runtime_config


def resolve_prep(stage: str, profile: str | None = None, overrides: Sequence[str] = ()) -> tuple[str | None, Any]:
    """(profile, validated config) of a prep stage; raises ParamsError naming the key."""
    spec = get_prep_stage(stage)
    model, params, source = spec.load_config_model(), read_params(params_path()), params_path().name
    if spec.follows == spec.section:
        return load_method_config(model, params, spec.section, profile, overrides, source)
    if spec.follows:
        return load_data_config(model, params, spec.section, spec.follows, profile, overrides, source)
    if profile is not None:
        raise ParamsError(f"{source}: {spec.section}: one configuration for every profile (no "
                          f"{spec.section}.profiles); run {stage} without --profile {profile}")
    return None, load_section_config(model, params, spec.section, overrides, source)


def run_prep(stage: str, profile: str | None = None, overrides: Sequence[str] = ()) -> Any:
    runtime = runtime_config(read_params(params_path()))
    profile, _ = resolve_prep(stage, profile, overrides)  # fail here, before Prefect starts
    flow = get_prep_stage(stage).load_flow().with_options(task_runner=make_task_runner(runtime))
    return run_linked(flow, profile=profile, overrides=list(overrides))  # in a deployment run's tree


def stage_chunk_mapper(*tasks: Any) -> ChunkMap:
    """A prep flow's `map_chunks`: its items in chunks sized to the configured runner's workers."""
    return chunk_mapper(runtime_config(read_params(params_path())), *tasks)
