"""A run started from the Prefect UI is a versioned run: against the session's real `prefect server
start` (as `make ui` starts it; tests/conftest.py) and `python -m flows serve` in a fresh clone, deployment runs with parameters
become DVC experiments (`dvc exp show`) with MLflow runs tagged by them and leave the workspace as
it was; two runs at once are serialized; bad parameters fail the run at once. One server, one
serve process and two dnc runs at its smallest grid keep the module short."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from tests.conftest import make_clone
from tests.conftest import run_git as _git

BIN = Path(sys.executable).parent
RUN_TIMEOUT_S = 300
SERVER_TIMEOUT_S = 120
TRACKED_OUTPUTS = ("dvc.lock", "params", "metrics", "results", "runs", "plots", "reports")


def _stop_group(process: subprocess.Popen) -> None:
    """SIGTERM to the process's whole group (the runner's flow-run processes, DVC, its stages),
    SIGKILL to what is left after 30 s."""
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        try:  # the leader is gone; its children may not be
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return


def _snapshot(workspace: Path) -> dict[str, str]:
    """sha256 of every file of the workspace's tracked outputs."""
    files = [p for name in TRACKED_OUTPUTS for p in sorted([workspace / name, *(workspace / name).rglob("*")])
             if p.is_file()]
    return {str(p.relative_to(workspace)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


@pytest.fixture(scope="module")
def served(tmp_path_factory, prefect_server):
    """(workspace, API URL): a fresh clone served by `python -m flows serve` against the session's
    `prefect server start` on 127.0.0.1 (conftest), the serve process killed (with its children) at
    the end."""
    from prefect.client.orchestration import SyncPrefectClient

    root = tmp_path_factory.mktemp("deployments")
    workspace = make_clone(root / "workspace", profile=None, with_outputs=True)
    url = prefect_server
    env = {k: v for k, v in os.environ.items()
           if k not in ("PAPERLINE_ROOT", "MLFLOW_TRACKING_URI", "PREFECT_API_URL")}
    env |= {"PATH": str(BIN) + os.pathsep + env["PATH"], "PREFECT_HOME": str(root / "prefect")}
    logs = root / "logs"
    logs.mkdir()
    processes = []
    try:
        with open(logs / "serve.log", "w") as log:
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "flows", "serve"], cwd=workspace,
                # INFO: DVC's output in the runs' logs, which a failed assertion shows
                env=env | {"PREFECT_API_URL": url, "PREFECT_RUNNER_POLL_FREQUENCY": "1",
                           "PREFECT_LOGGING_LEVEL": "INFO"},
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        deadline = time.monotonic() + SERVER_TIMEOUT_S
        with SyncPrefectClient(api=url) as client:
            while True:
                try:
                    client.read_deployment_by_name("dvc-stage/dnc")
                    client.read_deployment_by_name("dvc-pipeline/pipeline")
                    break
                except Exception:
                    assert time.monotonic() < deadline and processes[0].poll() is None, \
                        (logs / "serve.log").read_text()[-3000:]
                    time.sleep(0.5)
        yield workspace, url
    finally:
        for process in reversed(processes):
            _stop_group(process)


def _start(url: str, parameters: dict) -> str:
    from prefect.client.orchestration import SyncPrefectClient

    with SyncPrefectClient(api=url) as client:
        deployment = client.read_deployment_by_name("dvc-stage/dnc")
        return str(client.create_flow_run_from_deployment(deployment.id, parameters=parameters).id)


def _wait(url: str, flow_run_id: str):
    from prefect.client.orchestration import SyncPrefectClient

    deadline = time.monotonic() + RUN_TIMEOUT_S
    with SyncPrefectClient(api=url) as client:
        while True:
            flow_run = client.read_flow_run(flow_run_id)
            if flow_run.state and flow_run.state.is_final():
                return flow_run
            assert time.monotonic() < deadline, f"flow run {flow_run.name} still {flow_run.state_name}"
            time.sleep(1)


def _logs(url: str, flow_run_id: str) -> str:
    from prefect.client.orchestration import SyncPrefectClient
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    with SyncPrefectClient(api=url) as client:
        logs = client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
    return "\n".join(log.message for log in logs)[-6000:]


def _experiment_name(flow_run, profile: str = "tiny") -> str:
    return f"dnc-{profile}-{flow_run.name}-{str(flow_run.id)[:6]}"


def _dvc_experiments(workspace: Path) -> dict[str, dict]:
    """name → data (params, metrics) of every experiment `dvc exp show` lists."""
    shown = subprocess.run([str(BIN / "dvc"), "exp", "show", "--json"], cwd=workspace, capture_output=True,
                           text=True, check=True).stdout
    return {rev["name"]: rev["data"] for baseline in json.loads(shown)
            for exp in (baseline.get("experiments") or []) for rev in exp["revs"]}


def _mlflow_runs(workspace: Path, experiment: str):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{workspace / 'mlflow.db'}")
    dnc = client.get_experiment_by_name("dnc")
    return client.search_runs([dnc.experiment_id], filter_string=f"tags.dvc_experiment = '{experiment}'")


def _experiment_refs(workspace: Path) -> str:
    """The git refs DVC keeps its experiments under (cheaper to read than `dvc exp show`)."""
    return _git(workspace, "for-each-ref", "refs/exps")


def _assert_recorded(workspace: Path, url: str, flow_run, overrides: dict, experiments: dict) -> None:
    """The run's DVC experiment (in `experiments`, from `dvc exp show`) and MLflow runs exist and
    say what it ran; its method flow run is a subflow of it in Prefect."""
    from prefect.client.orchestration import SyncPrefectClient
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterTags

    name = _experiment_name(flow_run)
    experiment = experiments[name]
    params = experiment["params"]["params/dnc.yaml"]["data"]["dnc"]
    assert params["profile"] == "tiny" and params["profiles"]["tiny"].items() >= overrides.items()
    assert experiment["metrics"]["metrics/dnc.json"]["data"], "the experiment has its metrics"

    runs = _mlflow_runs(workspace, name)
    assert len(runs) >= 2 and {r.info.status for r in runs} == {"FINISHED"}  # a parent and its children
    head = _git(workspace, "rev-parse", "HEAD").strip()
    assert {r.data.tags["git_commit"] for r in runs} == {head}
    assert {r.data.tags["profile"] for r in runs} == {"tiny"}
    assert all(r.info.artifact_uri.startswith((workspace / "mlartifacts").as_uri()) for r in runs)

    with SyncPrefectClient(api=url) as client:
        [method_run] = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            tags=FlowRunFilterTags(all_=[f"dvc-exp:{name}"])))
        assert f"deployment-run:{flow_run.id}" in method_run.tags
        assert method_run.state.is_completed()
        tracking_task = client.read_task_run(method_run.parent_task_run_id)
        assert tracking_task.flow_run_id == flow_run.id  # one tree in the Prefect UI


# The smallest dnc grid (one group, one width, one seed); the second run adds a float and a key
# the tiny profile lacks (a model default), as the UI sends them: `key=value` strings.
SMALL = {"seeds": [0], "depths": [1], "width_multipliers": [1]}
OVERRIDES = [SMALL, SMALL | {"lam": 2e-3, "grad_tol": 1e-5}]


def test_two_runs_with_parameters_at_once_are_serialized_dvc_experiments(served):
    """What a UI run with parameters must do, for two started at once: both COMPLETED, one after
    the other; each a DVC experiment with its params and metrics in `dvc exp show`, its MLflow
    runs tagged with it; the workspace's tracked outputs unchanged."""
    from prefect.client.orchestration import SyncPrefectClient
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterTags

    workspace, url = served
    before = _snapshot(workspace)
    ids = [_start(url, {"method": "dnc", "profile": "tiny",
                        "overrides": [f"{k}={json.dumps(v)}" for k, v in overrides.items()]})
           for overrides in OVERRIDES]
    flow_runs = [_wait(url, flow_run_id) for flow_run_id in ids]
    for flow_run in flow_runs:
        assert flow_run.state.is_completed(), _logs(url, str(flow_run.id))
    experiments = _dvc_experiments(workspace)
    for flow_run, overrides in zip(flow_runs, OVERRIDES):
        _assert_recorded(workspace, url, flow_run, overrides, experiments)

    with SyncPrefectClient(api=url) as client:  # the method flow runs, each inside DVC, did not overlap
        method_runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            tags=FlowRunFilterTags(any_=[f"deployment-run:{f.id}" for f in flow_runs])))
    first, second = sorted(method_runs, key=lambda f: f.start_time)
    assert first.end_time <= second.start_time
    assert _snapshot(workspace) == before
    assert _git(workspace, "status", "--porcelain") == ""


def test_bad_parameters_fail_the_run_at_once_with_the_key_named_and_change_nothing(served):
    workspace, url = served
    before, experiments = _snapshot(workspace), _experiment_refs(workspace)
    flow_run = _wait(url, _start(url, {"method": "dnc", "profile": "tiny", "overrides": ["lamda=0.1"]}))
    assert flow_run.state.is_failed()
    assert "params/dnc.yaml: dnc.profiles.tiny.lamda: unknown parameter" in flow_run.state.message
    assert flow_run.end_time - flow_run.start_time < timedelta(seconds=20)  # before DVC starts
    assert _snapshot(workspace) == before and _experiment_refs(workspace) == experiments
    assert _git(workspace, "status", "--porcelain") == ""
