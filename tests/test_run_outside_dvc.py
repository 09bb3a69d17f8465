"""`python -m flows run` outside DVC never writes the workspace's versioned outputs: it writes a
scratch folder of its own; `--in-place` writes them with the params files' parameters only, and refuses
anything else (exit 2) showing the `dvc exp run` that runs it versioned."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flows.launch import cli_outputs, run_method
from paperline.config import ParamsError
from tasks import paths
from tests.conftest import CHECKOUT

# what a `dvc repro dnc` put in the workspace: a run outside DVC must leave every byte of it
VERSIONED = ("metrics/dnc.json", "models/dnc/run.json", "plots/dnc/curve.csv", "runs/dnc/mlflow_run.json")


def _cli(project: Path, *args: str, api: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("DVC_STAGE", "DVC_EXP_NAME", paths.OUTPUT_ROOT_ENV)}
    env |= {"PAPERLINE_ROOT": str(project), "MLFLOW_TRACKING_URI": f"sqlite:///{project / 'mlflow.db'}"}
    if api:
        env["PREFECT_API_URL"] = api
    return subprocess.run([sys.executable, "-m", "flows", "run", "dnc", *args], cwd=CHECKOUT, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture
def outside_dvc(monkeypatch):
    for key in ("DVC_STAGE", "DVC_EXP_NAME", paths.OUTPUT_ROOT_ENV):
        monkeypatch.delenv(key, raising=False)


def test_a_run_outside_dvc_writes_a_scratch_folder_and_leaves_the_versioned_outputs(project, prefect_server,
                                                                                      outside_dvc):
    for name in VERSIONED:
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(f"versioned {name}\n")
    proc = _cli(project, "--profile", "tiny", api=prefect_server)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for name in VERSIONED:
        assert (project / name).read_text() == f"versioned {name}\n", name
    assert sorted(p.relative_to(project).as_posix() for p in (project / "models").rglob("*")) == \
        ["models/dnc", "models/dnc/run.json"]
    [scratch] = list((project / "scratch").iterdir())
    assert scratch.name.startswith("dnc-") and str(scratch) in proc.stdout
    assert json.loads((scratch / "metrics" / "dnc.json").read_text())
    assert json.loads((scratch / "models" / "dnc" / "run.json").read_text())["complete"] is True
    assert any((scratch / "plots" / "dnc").iterdir())
    pointer = json.loads((scratch / "runs" / "dnc" / "mlflow_run.json").read_text())
    from tasks import track

    parent = track.client().get_run(pointer["run_id"])
    assert parent.data.tags["profile"] == "tiny" and parent.data.tags["dvc_experiment"] == "none"


def test_in_place_with_other_parameters_exits_2_showing_the_dvc_experiment(project, outside_dvc):
    proc = _cli(project, "--in-place", "--profile", "tiny", "--set", "lam=5e-3")
    assert proc.returncode == 2, proc.stderr
    assert ("exp run --temp -S params/dnc.yaml:dnc.profile=tiny -S params/dnc.yaml:++dnc.profiles.tiny.lam=0.005 dnc"
            in proc.stderr)
    assert sorted(p.name for p in project.iterdir()) == ["mlflow.db", "params"]  # nothing started


def test_in_place_is_allowed_with_the_params_files_own_parameters_only(project, outside_dvc):
    assert cli_outputs("dnc", None, [], in_place=True) is None
    assert cli_outputs("dnc", "smoke", [], in_place=True) is None  # params/dnc.yaml: dnc.profile: smoke
    with pytest.raises(ParamsError, match=r"params/dnc.yaml names \(dnc.profile=smoke, no --set\)"):
        cli_outputs("dnc", "tiny", [], in_place=True)
    with pytest.raises(ParamsError, match=r"exp run --temp -S params/dnc.yaml:dnc.profile=tiny dnc$"):
        cli_outputs("dnc", "tiny", [], in_place=True)
    with pytest.raises(ParamsError, match=r"-S params/dnc.yaml:dnc.profile=smoke "
                                         r"-S 'params/dnc.yaml:\+\+dnc.profiles.smoke.depths=\[1,4\]' dnc"):
        cli_outputs("dnc", None, ["depths=[1, 4]"], in_place=True)
    with pytest.raises(ParamsError, match="lamda: unknown parameter"):  # validated first, as always
        cli_outputs("dnc", None, ["lamda=1"], in_place=True)
    assert not (project / "scratch").exists()


def test_outside_dvc_each_run_gets_a_scratch_folder_of_its_own(project, outside_dvc):
    first = cli_outputs("dnc", "tiny", ["lam=5e-3"])
    second = cli_outputs("dnc", "tiny", [])
    assert first != second and first.parent == second.parent == project / "scratch"
    assert first.name.startswith("dnc-") and first.is_dir() and second.is_dir()
    assert cli_outputs("dnc", "tiny", [], out=str(first)) == first  # a killed run's folder, to resume


def test_inside_a_dvc_stage_the_run_writes_the_workspace(project, outside_dvc, monkeypatch):
    monkeypatch.setenv("DVC_STAGE", "dnc")  # DVC 3 sets it for every stage command (dvc/stage/run.py)
    assert cli_outputs("dnc", "tiny", ["lam=5e-3"]) is None  # `dvc exp run -S` changed params/dnc.yaml
    with pytest.raises(ParamsError, match="--out"):
        cli_outputs("dnc", None, [], out=str(project / "elsewhere"))
    assert not (project / "scratch").exists()


def test_only_a_methods_outputs_move_to_the_scratch_folder(project, outside_dvc, monkeypatch, tmp_path):
    monkeypatch.setenv(paths.OUTPUT_ROOT_ENV, str(tmp_path / "scratch"))
    assert paths.models_dir("dnc") == tmp_path / "scratch" / "models" / "dnc"
    assert paths.metrics_path("dnc") == tmp_path / "scratch" / "metrics" / "dnc.json"
    assert paths.plots_dir("dnc") == tmp_path / "scratch" / "plots" / "dnc"
    assert paths.run_pointer_path("dnc") == tmp_path / "scratch" / "runs" / "dnc" / "mlflow_run.json"
    # the inputs: the params files, data the upstream stages prepared, committed data
    assert paths.params_path() == project / "params"
    assert paths.project_path("data/prepared/corpus") == project / "data" / "prepared" / "corpus"
    assert paths.project_path("models/lm-base") == project / "models" / "lm-base"
    assert paths.committed_data_path("data/raw") == CHECKOUT / "data" / "raw"


def test_run_method_restores_the_output_root(project, outside_dvc, monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr("flows.launch.run_linked", lambda flow, **kw: seen.append(paths.output_root()))
    run_method("dnc", "tiny", [], outputs=tmp_path / "run")
    assert seen == [tmp_path / "run"] and paths.output_root() == project


def test_git_and_dvc_ignore_the_scratch_folders():
    assert subprocess.run(["git", "check-ignore", "-q", "scratch/dnc-20260101-000000/metrics/dnc.json"],
                          cwd=CHECKOUT).returncode == 0
    assert "scratch/" in (CHECKOUT / ".dvcignore").read_text().split()
