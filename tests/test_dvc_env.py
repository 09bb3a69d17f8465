"""What a stage learns from DVC's environment: the experiment it runs in (an MLflow tag and a
Prefect tag) and where the workspace keeps MLflow's database and artifacts, which under
`dvc exp run --temp` is not the stage's working copy."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from flows.env import TEMPORARY_SERVER_DB, set_default_env
from flows.lineage import PARENT_FLOW_RUN_ENV, lineage_tags
from tasks import track


@pytest.mark.parametrize("env, expected", [
    ({}, "none"),
    ({"DVC_STAGE": "dnc"}, "repro"),
    ({"DVC_STAGE": "dnc", "DVC_EXP_NAME": "dnc-tiny-x"}, "dnc-tiny-x"),
])
def test_the_dvc_experiment_comes_from_dvcs_environment(monkeypatch, env, expected):
    for key in ("DVC_STAGE", "DVC_EXP_NAME", PARENT_FLOW_RUN_ENV):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert track.dvc_experiment() == expected
    assert lineage_tags() == ([] if expected == "none" else [f"dvc-exp:{expected}"])
    monkeypatch.setenv(PARENT_FLOW_RUN_ENV, "1234")
    assert lineage_tags()[-1] == "deployment-run:1234"


def test_runs_carry_the_dvc_experiment_tag(project, monkeypatch):
    monkeypatch.setenv("DVC_EXP_NAME", "dnc-tiny-x")
    with track.parent_run("m", "tiny", {}, "generated") as parent:
        pass
    assert track.client().get_run(parent.run_id).data.tags["dvc_experiment"] == "dnc-tiny-x"


def test_artifacts_live_beside_the_database_not_in_the_stages_copy(project, tmp_path, monkeypatch,
                                                                      mlflow_template_db):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "mlflow.db").write_bytes(mlflow_template_db.read_bytes())
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{workspace / 'mlflow.db'}")
    track.experiment_id("m")
    assert track.client().get_experiment_by_name("m").artifact_location == (workspace / "mlartifacts" / "m").as_uri()


def test_under_a_dvc_experiment_mlflow_and_prefect_state_stay_in_the_workspace(monkeypatch, tmp_path):
    environ = {k: v for k, v in os.environ.items()
               if k not in ("PAPERLINE_ROOT", "MLFLOW_TRACKING_URI", "PREFECT_HOME")}
    monkeypatch.setattr(os, "environ", environ | {"DVC_ROOT": str(tmp_path)})  # nothing leaks
    set_default_env()
    assert os.environ["MLFLOW_TRACKING_URI"] == f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert Path(os.environ["PREFECT_HOME"]) == tmp_path / ".prefect"


def test_a_flow_without_a_server_url_starts_its_temporary_server_without_the_task_run_recorder(monkeypatch):
    from flows.env import TASK_RUN_RECORDER

    environ = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", TASK_RUN_RECORDER)}
    monkeypatch.setattr(os, "environ", dict(environ))
    set_default_env()
    assert os.environ[TASK_RUN_RECORDER] == "false"
    # and a database of its own, apart from the prefect.db of `make ui`'s server in the same home
    database = os.environ["PREFECT_API_DATABASE_CONNECTION_URL"]
    assert database == f"sqlite+aiosqlite:///{Path(os.environ['PREFECT_HOME']) / TEMPORARY_SERVER_DB}"
    monkeypatch.setattr(os, "environ", environ | {"PREFECT_API_URL": "http://127.0.0.1:4200/api"})
    set_default_env()
    assert TASK_RUN_RECORDER not in os.environ  # a server of its own: `make ui`'s keeps its recorder
    assert "PREFECT_API_DATABASE_CONNECTION_URL" not in os.environ
