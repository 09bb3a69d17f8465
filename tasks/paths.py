"""Where things live. Everything is relative to the project root (the directory holding
params.yaml), so a flow started from anywhere writes where `dvc repro` tracks. PAPERLINE_ROOT
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


def project_path(value: str | os.PathLike) -> Path:
    """A path from params.yaml: absolute as given (after ~), else relative to the project root."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else repo_path(str(path))


def committed_data_path(value: str | os.PathLike) -> Path:
    """A path from params.yaml naming data committed to the repository (data/raw/...): as
    project_path, but a relative one the project lacks is found in the code's checkout."""
    path = project_path(value)
    if not path.exists() and not Path(value).expanduser().is_absolute() and (code_root() / value).exists():
        return code_root() / value
    return path


def params_path() -> Path:
    return repo_path("params.yaml")


def models_dir(method: str) -> Path:
    return repo_path("models", method)


def metrics_path(method: str) -> Path:
    return repo_path("metrics", f"{method}.json")


def plots_dir(method: str) -> Path:
    return repo_path("plots", method)


def run_pointer_path(method: str) -> Path:
    return repo_path("runs", method, "mlflow_run.json")
