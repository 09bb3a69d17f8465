"""Flower lives in the project venv beside Prefect, installed without its declared dependencies
(requirements-flower.txt, the Makefile's install): prefect, dvc, mlflow and flwr import together,
and a tiny Flower simulation (Ray backend, 3 virtual clients, FedAvg) runs to its exact result."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = r'''
import numpy as np
import dvc.api, mlflow, prefect, flwr
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg
from flwr.simulation import run_simulation

client = ClientApp()

@client.train()
def train(msg: Message, context: Context) -> Message:
    assert 0 <= int(context.node_config["partition-id"]) < 3
    arrays = [a + 1.0 for a in msg.content["arrays"].to_numpy_ndarrays()]
    return Message(RecordDict({"arrays": ArrayRecord(arrays), "metrics": MetricRecord({"num-examples": 1})}),
                   reply_to=msg)

result = {}
server = ServerApp()

@server.main()
def main(grid: Grid, context: Context) -> None:
    out = FedAvg(fraction_train=1.0, fraction_evaluate=0.0).start(
        grid=grid, initial_arrays=ArrayRecord([np.zeros(2)]), num_rounds=2)
    result["w"] = out.arrays.to_numpy_ndarrays()[0]

run_simulation(server_app=server, client_app=client, num_supernodes=3,
               backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                               "init_args": {"include_dashboard": False, "log_to_driver": False}})
# each round adds 1 to every entry, whichever clients were sampled
print("VERSIONS", prefect.__version__, mlflow.__version__, flwr.__version__, "RESULT", result["w"].tolist())
'''


def test_prefect_dvc_mlflow_and_flower_import_and_a_simulation_runs(tmp_path):
    env = os.environ | {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1",
                        "RAY_USAGE_STATS_ENABLED": "0", "FLWR_HOME": str(tmp_path / ".flwr")}
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("VERSIONS"))
    assert line.split()[3] == "1.42.0" and line.endswith("RESULT [2.0, 2.0]"), line
    pinned = (Path(__file__).parents[1] / "requirements-flower.txt").read_text()
    assert "flwr==1.42.0" in pinned
