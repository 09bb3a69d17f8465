"""Environment defaults every entry point sets before Prefect or MLflow is imported (measured
pitfalls: ../shared/TOOLING.md). An explicit environment variable always wins."""
from __future__ import annotations

import os
from pathlib import Path

from tasks.paths import repo_root


def set_default_env() -> None:
    # Under `dvc exp run --temp` a stage runs in a temporary copy of the repository that DVC deletes
    # afterwards; DVC_ROOT names the workspace, whose MLflow database and Prefect home keep the runs.
    workspace = Path(os.environ.get("PAPERLINE_ROOT") or os.environ.get("DVC_ROOT") or repo_root())
    defaults = {
        "PREFECT_HOME": str(workspace / ".prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        # the default 20 s is too close on 2 cores for the ephemeral server's start
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
        "MLFLOW_TRACKING_URI": f"sqlite:///{workspace / 'mlflow.db'}",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "DVC_NO_ANALYTICS": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "MPLBACKEND": "Agg",
    }
    for key, value in defaults.items():
        os.environ.setdefault(key, value)
