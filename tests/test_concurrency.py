"""Two things at once (issue 42, item 4): two method flows started together on one Prefect server and
one new MLflow store finish with every figure equal to the same flows run one after the other (the
tiny DAG's stages, which DVC runs one at a time), and every `from_pretrained` goes through the one
init lock. dnc and qfft: the two cheapest stages that need no prepared data; qfft loads its base LM
through `from_pretrained` in threads. Two deployment runs at once are serialized by the `dvc`
concurrency limit: tests/test_deployments.py."""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.kill_resume import differing_keys
from tests.conftest import CHECKOUT, clone_env

METHODS = ("dnc", "qfft")  # the mark waits for qfft's stage (the later in dvc.yaml); _records_of waits for dnc's
RECORDS = ("results/{m}.json", "metrics/{m}.json")
RUN_TIMEOUT_S = 600


def _start(method: str, root: Path, out: Path, env: dict[str, str], log: Path) -> subprocess.Popen:
    """`python -m flows run <method> --profile tiny` outside DVC, its outputs in `out`."""
    with open(log, "w") as handle:
        return subprocess.Popen([sys.executable, "-m", "flows", "run", method, "--profile", "tiny", "--out", str(out)],
                                cwd=CHECKOUT, env=env | {"PAPERLINE_ROOT": str(root)},
                                stdout=handle, stderr=subprocess.STDOUT)


def _records_of(clone: Path, method: str, timeout: float = 900) -> dict[str, dict]:
    """The records of `method`'s stage in the tiny DAG's clone, once its stage wrote them (the clone
    starts without them; DVC may run the two stages in either order)."""
    paths = [clone / r.format(m=method) for r in RECORDS]
    deadline = time.monotonic() + timeout
    while not all(p.is_file() for p in paths):
        assert time.monotonic() < deadline, f"the tiny DAG wrote no {paths} in {timeout:.0f} s"
        time.sleep(1)
    return {r.format(m=method): json.loads(p.read_text()) for r, p in zip(RECORDS, paths)}


@pytest.mark.dag_stage("qfft")
def test_two_method_flows_at_once_match_the_runs_one_after_the_other(dag_stage, prefect_server, tmp_path):
    from mlflow.tracking import MlflowClient

    one_after_the_other = {m: _records_of(dag_stage, m) for m in METHODS}
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"  # new: both processes create its tables at once
    env = {k: v for k, v in clone_env(dag_stage, prefect_server).items()
           if k not in ("DVC_STAGE", "DVC_EXP_NAME")} | {"MLFLOW_TRACKING_URI": store}
    # the DAG's clone (its params files at tiny) is the inputs' root; outputs go to tmp_path only
    processes = {m: _start(m, dag_stage, tmp_path / m, env, tmp_path / f"{m}.log") for m in METHODS}
    for method, process in processes.items():
        assert process.wait(timeout=RUN_TIMEOUT_S) == 0, (tmp_path / f"{method}.log").read_text()[-4000:]

    for method in METHODS:
        for record in (r.format(m=method) for r in RECORDS):
            together = json.loads((tmp_path / method / record).read_text())
            assert not differing_keys(one_after_the_other[method][record], together), \
                (record, differing_keys(one_after_the_other[method][record], together)[:5])

    client = MlflowClient(store)
    parents = {}
    for method in METHODS:
        pointer = json.loads((tmp_path / method / "runs" / method / "mlflow_run.json").read_text())
        [experiment] = [e for e in client.search_experiments() if e.name == method]  # created once
        runs = client.search_runs([experiment.experiment_id])
        parent = client.get_run(pointer["run_id"])
        # one tree: the parent, its variants' runs (and theirs: qfft's per seed), nothing else
        ids = {r.info.run_id for r in runs}
        assert [r.info.run_id for r in runs if "mlflow.parentRunId" not in r.data.tags] == [parent.info.run_id]
        assert all(r.data.tags["mlflow.parentRunId"] in ids for r in runs if r.info.run_id != parent.info.run_id)
        assert any(r.data.tags.get("mlflow.parentRunId") == parent.info.run_id for r in runs), method
        assert {r.info.status for r in runs} == {"FINISHED"}, method
        assert {r.data.tags["profile"] for r in runs} == {"tiny"}, method
        parents[method] = parent.info
    # they did run together: each parent run started before the other ended
    assert max(p.start_time for p in parents.values()) < min(p.end_time for p in parents.values())


_OPEN_WHEN_TOLD = """
import sys, time
from pathlib import Path
from tasks import track
Path(sys.argv[1] + ".ready").touch()
while not Path(sys.argv[2]).exists():
    time.sleep(0.01)
track.client().search_experiments()
"""


def test_processes_opening_one_new_store_at_once_create_it_once(tmp_path):
    """What two flows started together do first (tasks/track.py `_store_lock`): without the lock, one
    of them fails creating tables the other has just created."""
    go, env = tmp_path / "go", {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'new.db'}"}
    processes = [subprocess.Popen([sys.executable, "-c", _OPEN_WHEN_TOLD, str(tmp_path / str(i)), str(go)],
                                  cwd=CHECKOUT, env=env, stderr=subprocess.PIPE, text=True) for i in range(2)]
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"{i}.ready").exists() for i in range(2)):  # imported: start together
        assert time.monotonic() < deadline and all(p.poll() is None for p in processes)
        time.sleep(0.05)
    go.touch()
    for process in processes:
        _, err = process.communicate(timeout=120)
        assert process.returncode == 0, err[-3000:]


def _from_pretrained_outside_the_lock(repo: Path, package: str) -> list[str]:
    """`<file>:<line>` of every `.from_pretrained` a module of `repo`'s `package` reaches other than
    paperline/seeds.py's load_pretrained, which holds INIT_LOCK."""
    found = []
    for path in sorted((repo / package).rglob("*.py")):
        if path == repo / "paperline" / "seeds.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            named = (isinstance(node, ast.Attribute) and node.attr == "from_pretrained"
                     or isinstance(node, ast.Constant) and node.value == "from_pretrained")  # getattr(cls, "...")
            if named:
                found.append(f"{path.relative_to(repo)}:{node.lineno}")
    return found


@pytest.mark.parametrize("package", ["paperline", "tasks", "flows"])
def test_every_from_pretrained_holds_the_one_init_lock(package):
    """transformers' `from_pretrained` patches global state (the default dtype, init functions) while
    it loads: one in a thread beside another load or a seeded build changes that one's weights."""
    outside = _from_pretrained_outside_the_lock(CHECKOUT, package)
    assert not outside, f"call paperline.seeds.load_pretrained instead: {outside}"


def test_the_lock_check_finds_a_bare_from_pretrained(tmp_path):
    package = tmp_path / "paperline"
    package.mkdir()
    (package / "seeds.py").write_text("def load_pretrained(cls, path):\n    return cls.from_pretrained(path)\n")
    (package / "loader.py").write_text("from transformers import AutoModel\n\n"
                                       "def load(path):\n    return AutoModel.from_pretrained(path)\n")
    (package / "dynamic.py").write_text("def load(cls, path):\n    return getattr(cls, 'from_pretrained')(path)\n")
    assert _from_pretrained_outside_the_lock(tmp_path, "paperline") == ["paperline/dynamic.py:2",
                                                                         "paperline/loader.py:4"]
