"""The data-prep stages as Prefect flows: WSI downsampling writes the same files under the Dask
runner as under the thread runner (a slide that fails reported alike); `python -m flows` lists
both kinds, validates without importing Prefect or torch, and exits 2 on a bad parameter (naming the
key), 1 on bad input (naming the file).
Each stage's flow runs at the tiny profile in its method's tests (tests/test_*_flow.py,
tests/test_text_corpus_flow.py and the tulu-pool test below)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from flows.__main__ import main as flows_cli
from flows.prep import run_prep
from paperline.data import wsi, wsi_synth
from tests.conftest import CHECKOUT

TULU_DATA = CHECKOUT / "tests" / "data" / "influence_distillation"
TULU_SAMPLE, TULU_MALFORMED = TULU_DATA / "tulu_v2_sample.jsonl", TULU_DATA / "tulu_v2_malformed.jsonl"


def _cohort_with_a_broken_slide(project: Path) -> None:
    cohort = project / "data" / "wsi" / "cohort"
    wsi_synth.generate_cohort(cohort, wsi_synth.procedural_texture_bank(0), 5, 600.0, "contact", seed=1)
    shutil.copy(CHECKOUT / "tests" / "data" / "openslide" / "boxes.png", cohort / "boxes.png")
    rows = wsi.read_cohort_csv(cohort / "cohort.csv")
    rows.insert(2, wsi.CohortRow("PNG", cohort / "boxes.png", None, 5.0, True))
    wsi.write_cohort_csv(cohort / "cohort.csv", rows)


def _set_runtime(project: Path, **runtime) -> None:
    path = project / "params" / "runtime.yaml"
    params = yaml.safe_load(path.read_text())
    params["runtime"] |= runtime
    path.write_text(yaml.safe_dump(params, sort_keys=False))


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _index_without_timings(raw: bytes) -> dict:
    index = json.loads(raw)
    for entry in index["slides"].values():
        entry.pop("seconds")  # the one field that differs between any two runs
    return index


def test_wsi_downsampling_under_dask_writes_what_the_thread_runner_writes(project, prefect_server):
    _cohort_with_a_broken_slide(project)
    thumbnails = project / "data" / "wsi" / "thumbnails"
    _set_runtime(project, task_runner="thread", max_workers=2)
    run_prep("wsi-downsample", "tiny")
    by_threads = _files(thumbnails)
    _set_runtime(project, task_runner="dask", dask_workers=2)
    run_prep("wsi-downsample", "tiny")
    by_dask = _files(thumbnails)

    assert by_dask.keys() == by_threads.keys() and len(by_dask) == 2 * 5 + 1  # 5 slides' thumbnails and masks
    for name in by_dask.keys() - {"index.json"}:
        assert by_dask[name] == by_threads[name], name
    index = _index_without_timings(by_dask["index.json"])
    assert index == _index_without_timings(by_threads["index.json"])
    assert [f["patient_id"] for f in index["failed"]] == ["PNG"] and "boxes.png" in index["failed"][0]["file"]


def test_validating_a_prep_stage_imports_neither_prefect_nor_torch():
    probe = ("import sys; from flows import PREP_STAGES; from flows.prep import resolve_prep; "
             "[resolve_prep(s) for s in PREP_STAGES]; print(sorted({'prefect', 'torch'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=CHECKOUT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_cli_lists_prep_stages_and_exits_2_on_a_bad_key_or_a_bad_input(project, prefect_server, capsys):
    assert flows_cli(["list"]) == 0
    listed = capsys.readouterr().out
    assert "wsi-downsample" in listed and "tulu-select" in listed and "ztsurv" in listed
    assert flows_cli(["run", "wsi-downsample", "--profile", "tiny", "--set", "downsampel=25"]) == 2
    assert "wsi.profiles.tiny.downsampel: unknown parameter" in capsys.readouterr().err
    assert flows_cli(["run", "wsi-dowsample"]) == 2
    assert "unknown method or prep stage 'wsi-dowsample'" in capsys.readouterr().err
    assert flows_cli(["run", "wsi-downsample", "--profile", "tiny"]) == 2  # no cohort yet
    assert "data/wsi/cohort/cohort.csv: cannot read the cohort CSV" in capsys.readouterr().err
    assert not (project / "data" / "wsi" / "thumbnails").exists()


def test_pool_flow_exits_2_naming_a_bad_line_and_skip_invalid_counts(project, prefect_server, capsys):
    params = yaml.safe_load((project / "params" / "tulu.yaml").read_text())
    target_dir = project / "targets"
    target_dir.mkdir()
    for name in ("a",):
        for split in ("target", "eval"):
            shutil.copy(TULU_SAMPLE, target_dir / f"{name}.{split}.jsonl")
    params["tulu"]["profiles"]["paper"] = {"source": "tulu_file", "tulu_path": str(TULU_MALFORMED),
                                           "target_dir": "targets", "targets": ["a"], "pool_size": 2}
    (project / "params" / "tulu.yaml").write_text(yaml.safe_dump(params))
    assert flows_cli(["run", "tulu-pool", "--profile", "paper"]) == 2  # strict: the bad line stops it
    assert "tulu_v2_malformed.jsonl: line 2: not valid JSON" in capsys.readouterr().err
    assert not (project / "data" / "tulu").exists()  # nothing half-written
    assert flows_cli(["run", "tulu-pool", "--profile", "paper", "--set", "skip_invalid=true"]) == 0
    manifest = json.loads((project / "data" / "tulu" / "manifest.json").read_text())
    assert manifest["skipped"]["skipped"] == 4 and manifest["skipped"]["reasons"]["unknown_role"] == 1
    assert flows_cli(["run", "tulu-pool", "--profile", "paper", "--set", "pool_size=0"]) == 2
    assert "tulu.profiles.paper.pool_size" in capsys.readouterr().err
