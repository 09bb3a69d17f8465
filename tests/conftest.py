"""Test environment: a temporary PREFECT_HOME and one Prefect test server per session, a migrated
MLflow template database copied per test, and a temporary project root (PAPERLINE_ROOT) so no test
writes into the checkout's models/, metrics/ or mlflow.db."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parent.parent
_SESSION_TMP = Path(tempfile.mkdtemp(prefix="paperline-tests-"))

# Before anything imports prefect or mlflow (measured pitfalls: ../shared/TOOLING.md).
os.environ.update({
    "PREFECT_HOME": str(_SESSION_TMP / "prefect"),
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    "PREFECT_LOGGING_LEVEL": "WARNING",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DVC_NO_ANALYTICS": "1",
    "HF_HUB_OFFLINE": "1",
    "MPLBACKEND": "Agg",
})
os.environ.pop("PREFECT_API_URL", None)
os.environ.pop("PAPERLINE_ROOT", None)
os.environ.pop("MLFLOW_TRACKING_URI", None)


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(_SESSION_TMP, ignore_errors=True)


@pytest.fixture(scope="session")
def prefect_server():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90):
        yield


@pytest.fixture(scope="session")
def mlflow_template_db() -> Path:
    """A migrated MLflow SQLite database (migrations take ~2 s; copying takes ms)."""
    from mlflow.tracking import MlflowClient

    path = _SESSION_TMP / "template-mlflow.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture
def project(tmp_path, monkeypatch, mlflow_template_db) -> Path:
    """A fresh project root holding the checkout's params.yaml and an empty MLflow database."""
    root = tmp_path / "project"
    root.mkdir()
    shutil.copy(CHECKOUT / "params.yaml", root / "params.yaml")
    shutil.copy(mlflow_template_db, root / "mlflow.db")
    monkeypatch.setenv("PAPERLINE_ROOT", str(root))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{root / 'mlflow.db'}")
    return root


def finished_flow_runs(project: Path, method: str, profile: str = "tiny"):
    """(parent, children) of the MLflow run `runs/<method>/mlflow_run.json` points at, after
    checking that the parent finished under `profile`."""
    import json

    from tasks import track

    pointer = json.loads((project / "runs" / method / "mlflow_run.json").read_text())
    client = track.client()
    parent = client.get_run(pointer["run_id"])
    assert parent.info.status == "FINISHED" and parent.data.tags["profile"] == profile
    children = client.search_runs([parent.info.experiment_id],
                                  filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    return parent, children
