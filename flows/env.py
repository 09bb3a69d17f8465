"""Environment defaults every entry point sets before Prefect or MLflow is imported (measured
pitfalls: ../shared/TOOLING.md). An explicit environment variable always wins."""
from __future__ import annotations

import os
from pathlib import Path

from tasks.paths import repo_root

# Prefect's TaskRunRecorder service writes every task-run event into the server's SQLite database,
# and a task's request for a `gpu` concurrency slot waited ~2 s behind those writes each time (a
# trivial flow of ten 1-s GPU tasks: 36.4-38.4 s with it, 19.4-22.5 s without, benchmarks/slot_wait.py;
# ngn_m tiny 77.7 s -> 56.7 s; py-spy: the slot's INSERT sat in SQLite's busy handler). The servers this
# project starts for one command (`make run` without `make ui`, the test session) and the
# temporary one a flow starts when no PREFECT_API_URL is set have no UI anyone opens, so they run
# without it: their flow runs are recorded, their task runs are not. `make ui`'s server keeps it,
# so a user looking there sees every task run (and pays the wait). Set the variable to override.
TASK_RUN_RECORDER = "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_ENABLED"

# The temporary server keeps its own database in PREFECT_HOME, apart from the prefect.db of the
# servers `make ui` and `make run` start there. On one file, a temporary server reset the other's
# taken `gpu` slots (tasks/runners.py ensure_gpu_limit: over-admission), and a killed flow's slot
# stayed taken in it with no lease that would ever free it (the next run there waited forever;
# reproduced twice in the test suite). Its runs show in no UI, as before (no one opens it).
TEMPORARY_SERVER_DB = "temporary-server.db"
DATABASE_URL = "PREFECT_API_DATABASE_CONNECTION_URL"


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
        "RAY_USAGE_STATS_ENABLED": "0",  # the Ray runner: no usage report (offline)
    }
    if not os.environ.get("PREFECT_API_URL"):
        # the temporary server Prefect starts for this flow: no UI anyone opens (TASK_RUN_RECORDER)
        defaults[TASK_RUN_RECORDER] = "false"
    for key, value in defaults.items():
        os.environ.setdefault(key, value)
    if not os.environ.get("PREFECT_API_URL"):
        os.environ.setdefault(DATABASE_URL,
                              f"sqlite+aiosqlite:///{Path(os.environ['PREFECT_HOME']) / TEMPORARY_SERVER_DB}")
