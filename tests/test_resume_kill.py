"""A flow run killed with SIGKILL mid-training resumes from its checkpoints and ends with the
same metrics as an uninterrupted run."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from flows.env import TEMPORARY_SERVER_DB
from flows.launch import run_method
from tasks import track
from tests.conftest import CHECKOUT

# One group (K = 4, L = 3, d = 1, two seeds), long enough to be killed mid-way, short enough for
# the suite. grad_tol=1e-300: GD never stops early, so there is time to kill it mid-way.
SETTINGS = ["--set", "adam_steps=300", "--set", "gd_steps=3000", "--set", "checkpoint_every=100",
            "--set", "grad_tol=1e-300", "--set", "depths=[3]", "--set", "width_multipliers=[1]"]


def _cli(project, *args, api: str | None = None, prefect_db: Path | None = None) -> subprocess.Popen:
    env = os.environ | {"PAPERLINE_ROOT": str(project), "PYTHONUNBUFFERED": "1", "PREFECT_LOGGING_LEVEL": "INFO",
                        "MLFLOW_TRACKING_URI": f"sqlite:///{project / 'mlflow.db'}"}
    if api:
        env["PREFECT_API_URL"] = api
    else:  # the temporary server's own database (flows/env.py), migrated already
        shutil.copy(prefect_db, Path(env["PREFECT_HOME"]) / TEMPORARY_SERVER_DB)
    return subprocess.Popen([sys.executable, "-m", "flows", "run", "dnc", "--profile", "tiny", *args],
                            cwd=CHECKOUT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)


def test_sigkilled_run_resumes_to_the_same_metrics(project, prefect_server, prefect_template_db, tmp_path, monkeypatch):
    # The killed run on a temporary Prefect server of its own, which dies with it: on the shared
    # server its `gpu` slot would stay taken until the lease expires (tasks/runners.py
    # SLOT_LEASE_SECONDS), a wait of up to 75 s that says nothing about resuming. The resumed run
    # on the session's server: no second server to start (~11 s of CPU on a migrated database).
    scratch = project / "scratch" / "dnc-killed"  # outside DVC the CLI writes there; --out resumes it
    killed = _cli(project, *SETTINGS, "--out", str(scratch), prefect_db=prefect_template_db)
    deadline = time.monotonic() + 240
    checkpoints = []
    while not checkpoints and killed.poll() is None and time.monotonic() < deadline:
        checkpoints = list((scratch / "models" / "dnc").glob("*/*.pt"))
        time.sleep(0.2)
    assert checkpoints, "no checkpoint appeared before the run ended"
    time.sleep(1.0)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait()
    assert not (scratch / "results" / "dnc.json").exists()  # nothing half-written
    killed_parent = json.loads((scratch / "models" / "dnc" / "run.json").read_text())["parent_run"]

    resumed = _cli(project, *SETTINGS, "--out", str(scratch), api=prefect_server)
    try:
        out, _ = resumed.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        os.killpg(resumed.pid, signal.SIGKILL)  # not left running into the rest of the session
        raise
    assert resumed.returncode == 0, out
    assert "resuming from its checkpoints" in out
    resumed_metrics = json.loads((scratch / "results" / "dnc.json").read_text())
    assert not (project / "metrics").exists() and not (project / "models").exists()  # the workspace's
    assert track.client().get_run(killed_parent).info.status == "FAILED"

    clean = tmp_path / "clean"
    clean.mkdir()
    shutil.copytree(project / "params", clean / "params")
    monkeypatch.setenv("PAPERLINE_ROOT", str(clean))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{clean / 'mlflow.db'}")
    run_method("dnc", "tiny", [s for s in SETTINGS if s != "--set"])
    assert json.loads((clean / "results" / "dnc.json").read_text()) == resumed_metrics
