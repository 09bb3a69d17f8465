"""The flow registries, read from `flows/registry.yaml`: the one list of methods and the one list
of shared data-prep stages. The entries live in a data file rather than here so that each
dvc.yaml stage depends on its own entry (a DVC param) and not on a file every new method edits."""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True)
class FlowSpec:
    name: str
    title: str
    config: str  # "module:Class" of the pydantic config model
    flow: str  # "module:function" of the Prefect flow

    def load_config_model(self) -> type:
        return _load(self.config)

    def load_flow(self) -> Any:
        return _load(self.flow)


@dataclass(frozen=True)
class MethodSpec(FlowSpec):
    status: str
    paper: str  # authors, title, venue: the MLflow experiment's description names it


def _load(path: str) -> Any:
    module, attr = path.split(":")
    return getattr(importlib.import_module(module), attr)


REGISTRY = Path(__file__).parent / "registry.yaml"


def _specs(kind: str, spec: type) -> dict:
    entries = yaml.safe_load(REGISTRY.read_text())[kind]
    try:
        return {name: spec(name, **entry) for name, entry in entries.items()}
    except TypeError as err:  # a missing or misspelt key
        raise ValueError(f"{REGISTRY}: an entry of `{kind}`: {err}") from None


METHODS: dict[str, MethodSpec] = _specs("methods", MethodSpec)


def get_method(name: str) -> MethodSpec:
    try:
        return METHODS[name]
    except KeyError:
        raise SystemExit(f"unknown method {name!r}; known: {', '.join(METHODS)}") from None


@dataclass(frozen=True)
class PrepSpec(FlowSpec):
    """A shared data-prep stage (`name`: its dvc.yaml stage) and the params `section` it reads
    (params/<section>.yaml): with `follows` None, one configuration for every profile; `follows` == `section`, a method's
    own section; else a data section at the profile the method `follows` names."""

    section: str
    follows: str | None = None


PREP_STAGES: dict[str, PrepSpec] = _specs("prep_stages", PrepSpec)


def get_prep_stage(name: str) -> PrepSpec:
    try:
        return PREP_STAGES[name]
    except KeyError:
        raise SystemExit(f"unknown prep stage {name!r}; known: {', '.join(PREP_STAGES)}") from None
