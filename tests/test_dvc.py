"""dvc.yaml and the flow registries name the same methods and data-prep stages; each stage's deps
are exactly the code its flow imports; `dvc repro` runs on a fresh clone and a second one is a no-op."""
from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from flows import METHODS, PREP_STAGES
from flows.dvc_stages import (
    NOT_IMPORTED,
    NOT_RUN_IN_A_STAGE,
    deps_diff,
    direct_imports,
    files_loaded_by,
    registered_stages,
    stage_modules,
)
from paperline.claims import outcome_counts
from paperline.metrics import validate_metrics
from tests.conftest import CHECKOUT, clone_env
from tests.test_plots_offline import drawn_plots, needs_chromium

DVC_YAML = yaml.safe_load((CHECKOUT / "dvc.yaml").read_text())
REPORT = "report"


def _deps(stage: str) -> list[str]:
    return DVC_YAML["stages"][stage]["deps"]


def _params(stage: str) -> dict[str, list[str]]:
    """The stage's params deps by file: {"params/dnc.yaml": ["dnc.profile", ...], ...}."""
    return {file: keys for entry in DVC_YAML["stages"][stage]["params"] for file, keys in entry.items()}


def test_dvc_stages_and_flow_registries_name_the_same_stages():
    stages = set(DVC_YAML["stages"]) - {REPORT}
    assert stages == set(METHODS) | set(PREP_STAGES)
    for name in METHODS:
        stage = DVC_YAML["stages"][name]
        assert stage["cmd"] == f"python -m flows run {name}"
        # `dvc metrics show` gets the flat outcome counts; the report reads the whole record
        assert stage["metrics"] == [{f"metrics/{name}.json": {"cache": False}}]
        assert {f"results/{name}.json": {"cache": False}} in stage["outs"]
        assert f"results/{name}.json" in _deps(REPORT) and f"metrics/{name}.json" not in _deps(REPORT)
        assert f"{name}.profiles.${{{name}.profile}}" in _params(name)[f"params/{name}.yaml"]
        assert f"params/{name}.yaml" in DVC_YAML["vars"]  # `${name.profile}` resolves
        assert _params(name)["flows/registry.yaml"] == [f"methods.{name}"]
    for name, spec in PREP_STAGES.items():
        stage = DVC_YAML["stages"][name]
        assert _params(name)["flows/registry.yaml"] == [f"prep_stages.{name}"]
        assert stage["cmd"] == f"python -m flows run {name}"
        assert _params(name)["params/runtime.yaml"] == ["runtime"]  # the stage's task runner
        assert f"params/{spec.section}.yaml" in _params(name), (name, spec.section)


def test_each_params_dep_names_the_file_of_its_section():
    """One file per section (params/<section>.yaml): a key listed under another section's file, or
    under DVC's default params.yaml (gone), would make DVC fail or track the wrong file."""
    for name in DVC_YAML["stages"]:
        assert all(isinstance(entry, dict) for entry in DVC_YAML["stages"][name]["params"]), name
        for file, keys in _params(name).items():
            if file != "flows/registry.yaml":
                assert (CHECKOUT / file).is_file(), (name, file)
                assert {key.split(".")[0] for key in keys} == {Path(file).stem}, (name, file, keys)
    interpolated = set(re.findall(r"\$\{(\w+)\.", (CHECKOUT / "dvc.yaml").read_text()))
    assert DVC_YAML["vars"] == sorted(f"params/{s}.yaml" for s in interpolated)


def test_a_stage_depends_on_its_own_registry_entry_only():
    """A new method's entry in flows/registry.yaml leaves every other stage up to date: the file
    is no stage's dependency as a whole, only the report's `methods` list is."""
    for name, stage in DVC_YAML["stages"].items():
        assert "flows/registry.yaml" not in stage["deps"], name
        entries = [p["flows/registry.yaml"] for p in stage["params"] if "flows/registry.yaml" in p]
        assert entries == ([["methods"]] if name == REPORT else [[f"{'methods' if name in METHODS else 'prep_stages'}.{name}"]])


def test_a_misspelt_registry_entry_names_the_file(tmp_path, monkeypatch):
    import flows

    registry = tmp_path / "registry.yaml"
    registry.write_text("methods:\n  m: {title: t, config: 'a:B', flow: 'a:f', staus: pipeline}\n")
    monkeypatch.setattr(flows, "REGISTRY", registry)
    with pytest.raises(ValueError, match=r"registry.yaml: an entry of `methods`.*staus"):
        flows._specs("methods", flows.MethodSpec)


def test_each_stage_depends_on_the_code_its_flow_imports():
    """Exactly: every file the stage's command can load is a dep, and every listed code dep (a
    folder: each .py file in it) is loaded, or named in NOT_IMPORTED with its reason."""
    produced = {o if isinstance(o, str) else next(iter(o))  # another stage's outs: made by dvc repro
                for s in DVC_YAML["stages"].values() for o in s.get("outs", [])}
    stages = registered_stages()
    assert set(stages) == set(DVC_YAML["stages"])
    for name, spec in (METHODS | PREP_STAGES).items():  # the graph reached the flow's own file
        assert f"{spec.flow.split(':')[0].replace('.', '/')}.py" in files_loaded_by(stages[name])
    diffs = [diff for name, modules in stages.items() if (diff := deps_diff(name, _deps(name), modules))]
    assert not diffs, ("the code deps differ from the import graph; apply (`python -m flows.dvc_stages` "
                       "does):\n" + "\n".join(diffs))
    for name in stages:
        missing = [d for d in _deps(name) if d not in produced and not (CHECKOUT / d).exists()]
        assert not missing, f"stage {name} depends on paths that do not exist: {missing}"
    assert all(reason for reason in NOT_IMPORTED.values())
    for importer, imported in NOT_RUN_IN_A_STAGE:  # each still an import of the tree: the list stays exact
        assert imported in direct_imports(importer, every=True), (importer, imported)


def test_a_deps_list_with_a_file_the_flow_does_not_load_prints_the_edit():
    spec = METHODS["dnc"]
    modules = stage_modules(spec.flow, spec.config, prep=False)
    extra = "paperline/methods/sumo/lm.py"
    diff = deps_diff("dnc", [*_deps("dnc"), extra], modules)
    assert diff == f"dvc.yaml stage dnc, its deps:\n  - {extra}"
    dropped = next(d for d in _deps("dnc") if d.startswith("tasks/"))
    assert deps_diff("dnc", [d for d in _deps("dnc") if d != dropped], modules) == \
        f"dvc.yaml stage dnc, its deps:\n  + {dropped}"
    # a folder some of whose files the flow does not load: its loaded files instead
    folder = deps_diff("dnc", [*_deps("dnc"), "paperline/methods/sumo"], modules)
    assert folder.endswith("  - paperline/methods/sumo") and "  + " not in folder


def test_empty_files_are_no_deps_so_dvc_does_not_warn_of_them(tmp_path):
    """DVC warns `'<file>' is empty.` at every stage for each empty dep: a loaded empty file is left
    out (a listed one gets removed, a listed folder holding one stays), and is a dep once filled."""
    from flows.dvc_stages import code_deps, deps_edit, direct_imports

    (tmp_path / "paperline" / "pkg").mkdir(parents=True)
    (tmp_path / "paperline" / "__init__.py").write_text("")
    (tmp_path / "paperline" / "pkg" / "__init__.py").write_text("")
    (tmp_path / "paperline" / "pkg" / "a.py").write_text("X = 1\n")
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "__main__.py").write_text("import paperline.pkg.a\n")
    modules = ["flows.__main__"]
    direct_imports.cache_clear()
    try:
        assert code_deps(modules, tmp_path) == ["flows/__main__.py", "paperline/pkg/a.py"]
        assert deps_edit(["flows/__main__.py", "paperline/__init__.py", "paperline/pkg"], modules, tmp_path) \
            == ([], ["paperline/__init__.py"])
        (tmp_path / "paperline" / "__init__.py").write_text('"""Filled."""\n')
        assert deps_edit(["flows/__main__.py", "paperline/pkg"], modules, tmp_path) == (["paperline/__init__.py"], [])
    finally:
        direct_imports.cache_clear()


def test_the_import_graph_follows_every_import_statement_and_relative_imports(tmp_path, monkeypatch):
    import flows.dvc_stages as graph

    package = tmp_path / "paperline"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from . import leaf\n")
    (package / "sub" / "leaf.py").write_text("try:\n    from ..lazy import g\nexcept ImportError:\n    pass\n"
                                            "def f():\n    from paperline import called_only\n")
    (package / "lazy.py").write_text("import paperline.deep.er as u\nimport numpy\n")
    (package / "deep").mkdir()
    (package / "deep" / "__init__.py").write_text("")
    (package / "deep" / "er.py").write_text("")
    (package / "called_only.py").write_text("")
    (package / "other_command.py").write_text("")
    (tmp_path / "flows").mkdir()  # the dispatcher: its function-level imports are other subcommands
    (tmp_path / "flows" / "__main__.py").write_text("def main():\n    import paperline.other_command\n")
    monkeypatch.setattr(graph, "ROOT", tmp_path)
    graph.direct_imports.cache_clear()
    try:
        assert graph.files_loaded_by(["flows.__main__", "paperline.sub"]) == [
            "flows/__main__.py", "paperline/__init__.py", "paperline/called_only.py", "paperline/deep/__init__.py",
            "paperline/deep/er.py", "paperline/lazy.py", "paperline/sub/__init__.py", "paperline/sub/leaf.py"]
        monkeypatch.setattr(graph, "NOT_RUN_IN_A_STAGE", {("paperline.lazy", "paperline.deep.er"): "a test"})
        graph.direct_imports.cache_clear()
        assert "paperline/deep/er.py" not in graph.files_loaded_by(["paperline.sub"])
        assert "paperline.deep.er" in graph.direct_imports("paperline.lazy", every=True)
    finally:
        graph.direct_imports.cache_clear()


def test_dvc_repro_on_a_fresh_clone_then_a_no_op(tiny_dag):
    """The whole DAG at the tiny profile (the session's one run, see tests/conftest.py), then a
    second `dvc repro` that re-runs nothing."""
    clone = tiny_dag.root
    for name in METHODS:
        assert (clone / "results" / f"{name}.json").exists() and (clone / "metrics" / f"{name}.json").exists()
        assert (clone / "runs" / name / "mlflow_run.json").exists()
    report = (clone / "reports" / "results.md").read_text()
    assert all(f"## {name}" in report for name in METHODS) and "_not run yet_" not in report
    assert report.index("## Claims") < report.index(f"## {next(iter(METHODS))}")  # the claims table first
    for name in METHODS:  # every method reports claims it declared, one against the trivial baseline
        claims = validate_metrics(json.loads((clone / "results" / f"{name}.json").read_text()), name).claims
        declared = {s.name for s in importlib.import_module(f"paperline.methods.{name}.claims").SPECS}
        assert claims and {c.name for c in claims} <= declared, (name, [c.name for c in claims])
        assert any(c.trivial for c in claims), name
        assert json.loads((clone / "metrics" / f"{name}.json").read_text()) == outcome_counts(claims), name
    assert (clone / "mlflow.db").exists()  # the default tracking URI, inside the project
    print(f"tiny dvc repro of the whole DAG: {tiny_dag.seconds:.0f} s")

    dvc = [str(Path(sys.executable).parent / "dvc")]
    shown = subprocess.run(dvc + ["metrics", "show", "--md"], cwd=clone, env=clone_env(clone), capture_output=True,
                           text=True, timeout=120)
    lines = [line for line in shown.stdout.splitlines() if line]
    assert shown.returncode == 0 and len(lines) == 2 + len(METHODS), shown.stdout + shown.stderr
    assert max(map(len, lines)) <= 80, shown.stdout  # one readable row per method
    started = time.monotonic()
    second = subprocess.run(dvc + ["repro"], cwd=clone, env=clone_env(clone), capture_output=True, text=True,
                            timeout=120)
    elapsed = time.monotonic() - started
    assert second.returncode == 0, second.stdout + second.stderr
    assert "Running stage" not in second.stdout, second.stdout
    status = subprocess.run(dvc + ["status", "--json"], cwd=clone, env=clone_env(clone), capture_output=True,
                            text=True, timeout=120)
    assert status.returncode == 0 and status.stdout.strip() in ("{}", ""), status.stdout
    print(f"no-op dvc repro: {elapsed:.2f} s")


def test_claims_land_on_each_parent_run_for_the_runs_table(dag):
    """Each claim's effect, interval and seeds on the flow's parent MLflow run, its verdict a tag,
    so the MLflow runs table filters by verdict."""
    from tasks import track
    from tests.conftest import finished_flow_runs

    for name in METHODS:
        claims = validate_metrics(json.loads((dag / "results" / f"{name}.json").read_text()), name).claims
        parent, _ = finished_flow_runs(dag, name)
        tags, metrics = parent.data.tags, parent.data.metrics
        for c in claims:
            assert tags[f"claim.{c.name}.verdict"] == c.verdict, (name, c.name)
            assert metrics[f"claim.{c.name}.seeds"] == c.seeds
            if c.effect is not None:
                assert metrics[f"claim.{c.name}.effect"] == pytest.approx(c.effect)
        assert "verdicts" in tags, name
        experiment = track.client().get_experiment(parent.info.experiment_id)
        for described in (experiment.tags[track.NOTE_TAG], tags[track.NOTE_TAG]):  # the UI's Description
            assert f"docs/methods/{name}.md" in described and METHODS[name].title in described
            assert f"Paper: {METHODS[name].paper}" in described
            assert all(f"`{c.name}`" in described for c in claims)


def test_dvc_plots_show_writes_a_page_that_renders_offline(dag, tmp_path):
    """The project's DVC config points `dvc plots show` at a template with vega, vega-lite and
    vega-embed inline (vendor/vega/): the page loads no remote script."""
    dvc = str(Path(sys.executable).parent / "dvc")
    out = tmp_path / "plots"
    shown = subprocess.run([dvc, "plots", "show", "-o", str(out)], cwd=dag, env=clone_env(dag),
                           capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    page = (out / "index.html").read_text()
    assert "vegaEmbed(" in page and "<script src=" not in page and "cdn.jsdelivr" not in page
    assert page.count("<script>") >= 3  # the three libraries inline, then the plots' own calls
    for image in re.findall(r'<img src="(static/[^"]+)"', page):  # the PNG plots, copied beside the page
        assert (out / image).is_file(), image


@needs_chromium
def test_headless_chromium_draws_every_data_plot_of_the_dag_offline(dag, tmp_path):
    dvc = str(Path(sys.executable).parent / "dvc")
    shown = subprocess.run([dvc, "plots", "show", "-o", str(tmp_path / "plots")], cwd=dag, env=clone_env(dag),
                           capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    asked, drawn = drawn_plots(tmp_path / "plots" / "index.html")
    assert asked >= 10 and drawn == asked, (asked, drawn)
