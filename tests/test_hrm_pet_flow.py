"""The HRM-PET flow: its outputs in the tiny DAG (metrics with a row per variant and the switch
table, the report's rows, a child MLflow run per variant carrying its row with the learners' runs
nested under them, plots, per-learner checkpoints), and the refused inputs (a backbone checkpoint
that does not fit, a class split that leaves a task empty) failing before any run starts."""
from __future__ import annotations

import json

import pytest
import yaml

from paperline.methods.hrm_pet.config import SWITCHES, VARIANTS
from paperline.metrics import validate_metrics
from paperline.nn.vit import CheckpointMismatchError, ViT, save_classifier
from tasks import track
from tests.conftest import CHECKOUT, finished_flow_runs, report_rows, vit_source_copy


def _tiny(project) -> dict:
    return yaml.safe_load((project / "params" / "hrm_pet.yaml").read_text())["hrm_pet"]["profiles"]["tiny"]


def test_tiny_dag_outputs(dag):
    path = dag / "results" / "hrm_pet.json"
    metrics = validate_metrics(json.loads(path.read_text()), str(path))
    assert list(metrics.rows) == list(VARIANTS) and metrics.profile == "tiny" and metrics.baseline == "hide_lora"
    tiny = _tiny(dag)
    names = [s["name"] for s in tiny["sequences"]]
    for v, row in metrics.rows.items():
        assert 0 <= row["final_accuracy"] <= 1 and 0 <= row["matching"] <= 1, v
        passes = 1 if v == "frozen_head" else 2  # the frozen head runs no LoRA
        assert row["forward_passes"] == pytest.approx(passes + row["extra_passes"])
        assert all(f"final_accuracy_{n}" in row for n in names)
    assert "oracle_final_accuracy" not in metrics.rows["frozen_head"]
    for v in ("frozen_head", "hide_lora", "ctird"):  # initial matching: no re-run
        assert metrics.rows[v]["extra_passes"] == 0 and metrics.rows[v]["matching"] == metrics.rows[v]["initial_matching"]
    h = metrics.headline
    assert h["hrm_pet_gain"] == pytest.approx(metrics.rows["hrm_pet"]["final_accuracy"] - metrics.rows["hide_lora"]["final_accuracy"])
    assert not any("claim" in k for k in h)
    from paperline.methods.hrm_pet.claims import SPECS

    claims = {c.name: c for c in metrics.claims}
    assert claims and set(claims) <= {s.name for s in SPECS} and any(c.trivial for c in claims.values())
    # a claim pairs per seed, each side the mean over that seed's sequences
    assert claims["hrm_pet_above_hide_lora"].seeds == len(tiny["seeds"]) and claims["hrm_pet_above_hide_lora"].effect == pytest.approx(h["hrm_pet_gain"])
    assert set(metrics.tables["code_vs_paper_switches"]) == set(SWITCHES)
    assert metrics.details["sources"] == {"digits": "digits", "fashion": "fashion_mnist"}  # no fallback
    assert sorted(report_rows(dag, "hrm_pet")) == sorted(VARIANTS)

    parent, children = finished_flow_runs(dag, "hrm_pet")
    assert [d.dataset.digest for d in parent.inputs.dataset_inputs] != ["generated"]  # versioned by content
    assert sorted(r.data.tags["variant"] for r in children) == sorted(VARIANTS)
    c = track.client()
    nested = []
    for child in children:
        assert child.info.status == "FINISHED"
        row = metrics.rows[child.data.tags["variant"]]
        assert child.data.metrics["final_accuracy"] == pytest.approx(row["final_accuracy"])
        nested += c.search_runs([parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{child.info.run_id}'")
    units = sorted(r.data.tags["variant"] for r in nested)  # one run per (sequence, seed, learner)
    assert units == sorted(f"{n}/{seed}/{learner}" for n in names for seed in tiny["seeds"]
                           for learner in ("plain", "ctird", "ctird_code"))
    first = next(r for r in nested if r.data.tags["variant"].endswith("/ctird"))
    tasks = next(s["tasks"] for s in tiny["sequences"] if first.data.tags["variant"].startswith(s["name"]))
    assert len(c.get_metric_history(first.info.run_id, "accuracy_hrm_pet")) == tasks
    pngs = [a.path for a in c.list_artifacts(parent.info.run_id, "plots") if a.path.endswith(".png")]
    assert sorted(p.name for p in (dag / "plots" / "hrm_pet").glob("*.png")) == sorted(p.rsplit("/", 1)[-1] for p in pngs)
    assert (dag / "plots" / "hrm_pet" / "accuracy_after_task.csv").read_text().startswith("sequence,tasks,frozen_head,hide_lora")
    assert json.loads((dag / "models" / "hrm_pet" / "run.json").read_text())["complete"]
    assert (dag / "models" / "hrm_pet" / names[0] / "0" / "ctird.pt").is_file()


def test_refused_inputs_are_named(dag, tmp_path):
    from paperline.methods.hrm_pet.config import HrmPetConfig
    from paperline.methods.hrm_pet.data import TaskSplitError
    from tasks import hrm_pet

    cfg_here = vit_source_copy(dag, tmp_path)
    folder = tmp_path / "vit_source"
    cfg = HrmPetConfig(**_tiny(dag))
    got = hrm_pet.data(cfg, cfg_here)  # the copy is accepted as it is
    assert sorted(got.sequences) == sorted(f"{s.name}/{seed}" for s in cfg.sequences for seed in cfg.seeds)

    empty = cfg.model_copy(update={"sequences": [cfg.sequences[0].model_copy(update={"tasks": 7})]})
    with pytest.raises(TaskSplitError, match=r"sequence 'digits' \(digits\): 7 tasks for 6 classes leaves a task empty"):
        hrm_pet.data(empty, cfg_here)

    save_classifier(folder / "classifier.pt", ViT(dim=24, heads=2, depth=1))
    with pytest.raises(CheckpointMismatchError, match=r"classifier\.pt: the checkpoint does not fit the model: .*"
                                                      r"\(24,\) in the checkpoint, \(16,\) in the model"):
        hrm_pet.data(cfg, cfg_here)


def test_a_converted_colour_backbone_by_path_replaces_the_vit_source_classifier(tmp_path):
    """The paper profile's route, at tiny size: a transformers ViT (3 channels, LayerNorm eps 1e-12,
    as ViT-B/16) converted to this module, given as `backbone`; the grey sequences are resized to its
    input and a learner trains on it."""
    import torch
    from transformers import ViTConfig, ViTForImageClassification

    from paperline.config import validate
    from paperline.methods.hrm_pet.config import VARIANT_SPECS, HrmPetConfig
    from paperline.methods.hrm_pet.train import run_learner
    from paperline.nn.vit import load_classifier, vit_from_transformers
    from tasks.hrm_pet import data

    torch.manual_seed(0)
    hf = ViTForImageClassification(ViTConfig(image_size=12, patch_size=4, num_channels=3, hidden_size=16,
                                             num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                                             num_labels=1000))
    save_classifier(tmp_path / "vit_b16_like.pt", vit_from_transformers(hf))
    tiny = yaml.safe_load((CHECKOUT / "params" / "hrm_pet.yaml").read_text())["hrm_pet"]["profiles"]["tiny"]
    cfg = validate(HrmPetConfig, tiny | {"backbone": str(tmp_path / "vit_b16_like.pt")}, "test")
    prepared = data(cfg, source_cfg=None)  # no vit-source stage needed
    assert prepared.backbone == str(tmp_path / "vit_b16_like.pt")
    seq = next(iter(prepared.sequences.values()))
    assert seq.train_x.shape[1:] == (12, 12)  # resized from 8×8 digits to the backbone's input
    backbone = load_classifier(prepared.backbone)
    assert backbone.shape["channels"] == 3 and backbone.shape["norm_eps"] == 1e-12
    result = run_learner(cfg, VARIANT_SPECS["hide_lora"][0], seq, backbone, 0)
    records = result["evaluations"]["hide_lora"]
    assert len(records) == len(seq.task_classes) and all(0 <= r["accuracy"] <= 1 for r in records)
