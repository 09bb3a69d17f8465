"""What a user comparing a method with its baselines sees through `mlflow server` (as `make ui`
starts it), over its REST API, on the tiny DAG's store: the experiment opens on the training-runs
view, each run carries its data version as a dataset, the variants' child runs share their metric
names, and the parent holds the headline figures and the comparison table."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from flows.prefect_server import free_port
from tasks import track


@pytest.fixture
def mlflow_server(dag_stage):
    """`mlflow server` on the tiny DAG's store as soon as its dnc stage is done: later stages still
    write to the store meanwhile, as `make run` does under `make ui`."""
    port = free_port()
    env = os.environ | {"MLFLOW_DISABLE_TELEMETRY": "true"}
    proc = subprocess.Popen([str(Path(sys.executable).parent / "mlflow"), "server", "--backend-store-uri",
                             f"sqlite:///{dag_stage / 'mlflow.db'}", "--artifacts-destination",
                             str(dag_stage / "mlartifacts"), "--host", "127.0.0.1", "--port", str(port),
                             "--workers", "1"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    try:
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "mlflow server did not come up"
            time.sleep(1)
        yield url
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)


def _get(url: str, path: str, **query) -> dict:
    with urllib.request.urlopen(f"{url}/api/2.0/mlflow/{path}?{urllib.parse.urlencode(query)}", timeout=30) as r:
        return json.loads(r.read())


def _post(url: str, path: str, body: dict) -> dict:
    request = urllib.request.Request(f"{url}/api/2.0/mlflow/{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as r:
        return json.loads(r.read())


@pytest.mark.dag_stage("dnc")
def test_a_method_compared_through_the_mlflow_server(mlflow_server, dag_stage):
    record = json.loads((dag_stage / "results" / "dnc.json").read_text())
    pointer = json.loads((dag_stage / "runs" / "dnc" / "mlflow_run.json").read_text())
    exp = _get(mlflow_server, "experiments/get-by-name", experiment_name="dnc")["experiment"]
    assert {t["key"]: t["value"] for t in exp["tags"]}[track.EXPERIMENT_KIND_TAG] == "custom_model_development"

    runs = _post(mlflow_server, "runs/search", {"experiment_ids": [exp["experiment_id"]], "max_results": 1000,
                                                "filter": f"tags.mlflow.parentRunId = '{pointer['run_id']}'"})["runs"]
    by_variant = {next(t["value"] for t in r["data"]["tags"] if t["key"] == "variant"): r for r in runs}
    assert sorted(by_variant) == sorted(record["rows"])
    names = [{m["key"] for m in r["data"]["metrics"]} for r in by_variant.values()]
    shared = set.intersection(*names)
    assert {k for k, v in next(iter(record["rows"].values())).items() if isinstance(v, (int, float))
            and not isinstance(v, bool)} <= shared  # every row column is a metric of every child
    for run in by_variant.values():  # the Dataset column: the data version, logged as an input
        datasets = run["inputs"]["dataset_inputs"]
        assert [d["dataset"]["digest"] for d in datasets] == ["generated"]

    parent = _get(mlflow_server, "runs/get", run_id=pointer["run_id"])["run"]
    assert parent["info"]["status"] == "FINISHED"
    assert not any("/" in m["key"] for m in parent["data"].get("metrics", []))  # headline only
    artifacts = {f["path"] for f in _get(mlflow_server, "artifacts/list", run_id=pointer["run_id"])["files"]}
    assert {"comparison.json", "comparison.csv", "plots"} <= artifacts
