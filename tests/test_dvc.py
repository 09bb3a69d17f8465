"""dvc.yaml and the flow registries name the same methods and data-prep stages; each stage's deps
cover the code its flow imports; `dvc repro` runs on a fresh clone and a second one is a no-op."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

from flows import METHODS, PREP_STAGES
from tests.conftest import CHECKOUT

DVC_YAML = yaml.safe_load((CHECKOUT / "dvc.yaml").read_text())
REPORT = "report"


def _deps(stage: str) -> list[str]:
    return DVC_YAML["stages"][stage]["deps"]


def test_dvc_stages_and_flow_registries_name_the_same_stages():
    stages = set(DVC_YAML["stages"]) - {REPORT}
    assert stages == set(METHODS) | set(PREP_STAGES)
    for name in METHODS:
        stage = DVC_YAML["stages"][name]
        assert stage["cmd"] == f"python -m flows run {name}"
        assert f"metrics/{name}.json" in [next(iter(m)) for m in stage["metrics"]]
        assert f"metrics/{name}.json" in _deps(REPORT)
        assert f"{name}.profiles.${{{name}.profile}}" in stage["params"]
    for name, spec in PREP_STAGES.items():
        stage = DVC_YAML["stages"][name]
        assert stage["cmd"] == f"python -m flows run {name}"
        assert "runtime" in stage["params"]  # the stage's task runner
        assert any(p.split(".")[0] == spec.section for p in stage["params"]), (name, spec.section)


def test_each_stage_depends_on_the_code_its_flow_imports():
    probes = {}  # one import probe per flow, all started at once (each is a fresh interpreter)
    flows = {name: f"flows.launch, {spec.flow.split(':')[0]}" for name, spec in METHODS.items()}
    flows |= {name: f"flows.prep, {spec.flow.split(':')[0]}, {spec.config.split(':')[0]}"
              for name, spec in PREP_STAGES.items()}
    for name, modules in flows.items():
        probe = (f"import sys, flows.__main__, paperline.io, {modules}; "
                 "print('\\n'.join(m.__file__ for m in list(sys.modules.values()) "
                 "if getattr(m, '__file__', None)))")
        probes[name] = subprocess.Popen([sys.executable, "-c", probe], cwd=CHECKOUT, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
    for name, proc in probes.items():
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr
        ours = {Path(f).resolve().relative_to(CHECKOUT).as_posix() for f in stdout.split()
                if Path(f).is_absolute() and Path(f).resolve().is_relative_to(CHECKOUT) and "/.venv/" not in f}
        deps = _deps(name)
        uncovered = [f for f in ours if not any(f == d or f.startswith(d.rstrip("/") + "/") for d in deps)]
        assert not uncovered, f"stage {name} reads code it does not depend on: {uncovered}"
        produced = {o if isinstance(o, str) else next(iter(o))  # another stage's outs: made by dvc repro
                    for s in DVC_YAML["stages"].values() for o in s.get("outs", [])}
        missing = [d for d in deps if d not in produced and not (CHECKOUT / d).exists()]
        assert not missing, f"stage {name} depends on paths that do not exist: {missing}"


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_dvc_repro_on_a_fresh_clone_then_a_no_op(tmp_path, prefect_server):
    clone = tmp_path / "clone"
    _git(CHECKOUT, "worktree", "prune")
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                           cwd=CHECKOUT, capture_output=True, text=True, check=True).stdout.split()
    for f in files:
        if (CHECKOUT / f).is_file() and not f.startswith(("metrics/", "runs/", "reports/", "plots/")):
            (clone / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(CHECKOUT / f, clone / f)
    params = yaml.safe_load((clone / "params.yaml").read_text())
    for name in METHODS:
        params[name]["profile"] = "tiny"
    (clone / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    _git(clone, "init", "-q")
    _git(clone, "add", "-A")
    _git(clone, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "clone")

    bin_dir = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if k not in ("PAPERLINE_ROOT", "MLFLOW_TRACKING_URI")}
    env |= {"PATH": bin_dir + os.pathsep + env["PATH"], "PREFECT_HOME": str(tmp_path / "prefect")}
    # every flow reports to the session's Prefect server (as under `make ui`) rather than starting
    # a temporary one per stage: ~8 s a flow on 2 cores, a minute and a half over the pipeline
    from prefect.settings import get_current_settings

    assert get_current_settings().api.url, "the prefect_server fixture sets the API URL"
    env["PREFECT_API_URL"] = str(get_current_settings().api.url)
    dvc = [str(Path(bin_dir) / "dvc"), "repro"]
    first = subprocess.run(dvc, cwd=clone, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stdout + first.stderr
    for name in METHODS:
        assert (clone / "metrics" / f"{name}.json").exists()
        assert (clone / "runs" / name / "mlflow_run.json").exists()
    report = (clone / "reports" / "results.md").read_text()
    assert all(f"## {name}" in report for name in METHODS) and "_not run yet_" not in report
    assert (clone / "mlflow.db").exists()  # the default tracking URI, inside the project

    started = time.monotonic()
    second = subprocess.run(dvc, cwd=clone, env=env, capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - started
    assert second.returncode == 0, second.stdout + second.stderr
    assert "Running stage" not in second.stdout, second.stdout
    print(f"no-op dvc repro: {elapsed:.2f} s")
