"""`python -m flows new <method>` in a copy of the checkout's layout: the files it writes import and
validate at the tiny profile, its dvc.yaml stage's code deps are exact, ruff is clean on them, and
a refused name or a failed write leaves the copy as it was."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from flows import dvc_stages, new_method
from paperline.config import ParamsError, read_params
from tests.conftest import CHECKOUT

NAME = "toy_method"


@pytest.fixture
def layout(tmp_path: Path) -> Path:
    """The code, the params files, dvc.yaml and pyproject.toml (ruff's settings) of the checkout."""
    for folder in ("paperline", "tasks", "flows"):
        shutil.copytree(CHECKOUT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(CHECKOUT / "params", tmp_path / "params")
    for name in ("dvc.yaml", "pyproject.toml"):
        shutil.copy(CHECKOUT / name, tmp_path / name)
    (tmp_path / "docs" / "methods").mkdir(parents=True)
    (tmp_path / "tests").mkdir()
    return tmp_path


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_new_method_imports_validates_and_its_stage_deps_are_exact(layout):
    written = new_method.new_method(NAME, layout, "A toy method")
    assert all((layout / p).is_file() for p in written)
    stages = yaml.safe_load((layout / "dvc.yaml").read_text())["stages"]
    stage = stages[NAME]
    modules = dvc_stages.registered_stages(layout)[NAME]
    assert dvc_stages.deps_diff(NAME, stage["deps"], modules, layout) == ""
    assert {"flows/new_method.py", "flows/dvc_stages.py"}.isdisjoint(stage["deps"])  # `new`'s code: not run
    assert {f"tasks/{NAME}.py", f"flows/{NAME}.py", f"paperline/methods/{NAME}/train.py"} <= set(stage["deps"])
    assert stage["cmd"] == f"python -m flows run {NAME}"
    assert {f"params/{NAME}.yaml": [f"{NAME}.profile", f"{NAME}.profiles.${{{NAME}.profile}}"]} in stage["params"]
    dvc_vars = yaml.safe_load((layout / "dvc.yaml").read_text())["vars"]
    assert f"params/{NAME}.yaml" in dvc_vars and dvc_vars == sorted(dvc_vars)  # `${toy_method.profile}` resolves
    assert list(yaml.safe_load((layout / "params" / f"{NAME}.yaml").read_text())) == [NAME]
    assert any(f"/{NAME}.json" in d for d in stages["report"]["deps"])
    assert list(stages)[-1] == "report" and yaml.safe_load((layout / "flows" / "registry.yaml").read_text())[
        "methods"][NAME]["title"] == "A toy method"
    schedules = [s["schedule"] for s in read_params(layout / "params").values()
                 if isinstance(s, dict) and "schedule" in s]
    assert len(schedules) == len(set(schedules))

    # the generated code in a fresh interpreter, from the copy: config at tiny, three seeds, the record
    check = f"""
import json
from flows.launch import resolve
from flows.{NAME} import {NAME}_flow
from paperline.metrics import validate_metrics
from paperline.methods.{NAME}.summary import method_metrics
from paperline.methods.{NAME}.train import fit
from tasks.{NAME} import report, train_seed
profile, cfg = resolve("{NAME}", "tiny")
record = method_metrics(cfg, {{s: fit(cfg, s) for s in cfg.run_seeds()}}, profile)
record = validate_metrics(json.loads(record.model_dump_json()), "{NAME}")
print(record.claims[0].verdict, record.claims[0].seeds, sorted(record.rows))
"""
    done = subprocess.run([sys.executable, "-c", check], cwd=layout, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(layout), "PYTHONPATH": str(layout)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[-2] == "shown 3 ['initial', 'trained']"
    python_files = [p for p in written if p.endswith(".py")]
    ruff = subprocess.run([str(Path(sys.executable).parent / "ruff"), "check", *python_files], cwd=layout,
                          capture_output=True, text=True, timeout=120)
    assert ruff.returncode == 0, ruff.stdout


@pytest.mark.parametrize("name", ["aa", "zz_top", "tasks_x"])
def test_ruff_is_clean_on_the_files_whatever_the_name_sorts_among(layout, name):
    written = [p for p in new_method.new_method(name, layout) if p.endswith(".py")]
    ruff = subprocess.run([str(Path(sys.executable).parent / "ruff"), "check", *written], cwd=layout,
                          capture_output=True, text=True, timeout=120)
    assert ruff.returncode == 0, ruff.stdout


@pytest.mark.parametrize("name, error", [("dnc", "exists already"), ("tulu-pool", "lowercase Python identifier"),
                                         ("2fast", "lowercase Python identifier"), ("Toy", "lowercase"),
                                         ("class", "lowercase Python identifier"), ("runtime", "exists already")])
def test_a_taken_or_bad_name_is_refused_and_nothing_is_written(layout, name, error):
    before = _tree(layout)
    with pytest.raises(ParamsError, match=error):
        new_method.new_method(name, layout)
    assert _tree(layout) == before


def test_a_failure_while_writing_restores_every_file(layout, monkeypatch):
    before = _tree(layout)

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(new_method, "code_deps", broken)  # after every other file is written
    with pytest.raises(OSError, match="disk full"):
        new_method.new_method(NAME, layout)
    assert _tree(layout) == before and not (layout / "paperline" / "methods" / NAME).exists()
