"""Where things live. Everything is relative to the project root (the directory holding
params/, one params file per section), so a flow started from anywhere writes where `dvc repro` tracks. PAPERLINE_ROOT
points elsewhere (tests use a temporary root)."""
from __future__ import annotations

import os
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parent.parent


def code_root() -> Path:
    """The checkout holding the code (its git commit is what a run records)."""
    return _CHECKOUT


def repo_root() -> Path:
    return Path(os.environ.get("PAPERLINE_ROOT") or _CHECKOUT)


def repo_path(*parts: str) -> Path:
    return repo_root().joinpath(*parts)


# A run outside DVC writes its outputs to a scratch folder (flows/launch.py sets this); the inputs
# it reads (the params files, prepared data, upstream models) stay the project's.
OUTPUT_ROOT_ENV = "PAPERLINE_OUTPUT_ROOT"


def output_root() -> Path:
    """Where a method's outputs (models/, metrics/, results/, plots/, runs/) go: the project root unless a
    run outside DVC points them at its scratch folder."""
    return Path(os.environ.get(OUTPUT_ROOT_ENV) or repo_root())


def output_path(*parts: str) -> Path:
    return output_root().joinpath(*parts)


def project_path(value: str | os.PathLike) -> Path:
    """A path from the params files: absolute as given (after ~), else relative to the project root."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else repo_path(str(path))


def committed_data_path(value: str | os.PathLike) -> Path:
    """A path from the params files naming data committed to the repository (data/raw/...): as
    project_path, but a relative one the project lacks is found in the code's checkout."""
    path = project_path(value)
    if not path.exists() and not Path(value).expanduser().is_absolute() and (code_root() / value).exists():
        return code_root() / value
    return path


def params_path() -> Path:
    """The params folder: `params/<section>.yaml`, one file per top-level section."""
    return repo_path("params")


def models_dir(method: str) -> Path:
    return output_path("models", method)


def metrics_path(method: str) -> Path:
    """The claims' outcome counts `dvc metrics show` prints (the same few keys for every method)."""
    return output_path("metrics", f"{method}.json")


def results_path(method: str) -> Path:
    """The run's whole record (`paperline.metrics.MethodMetrics`): what the report reads."""
    return output_path("results", f"{method}.json")


def plots_dir(method: str) -> Path:
    return output_path("plots", method)


def run_pointer_path(method: str) -> Path:
    return output_path("runs", method, "mlflow_run.json")
