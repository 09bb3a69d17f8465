"""The CodeMerge flow and its vit-source stage: their outputs in the tiny DAG (the source record,
metrics with their claims, report rows, an MLflow child per variant with its row and a run per
seed nested under it with its per-batch curve, plots, resume checkpoints), and the refused inputs (an image array of the wrong dtype or shape, a classifier that
does not fit its shape) failing before any run starts, naming the file."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml

from paperline.data.images import ImageDataError
from paperline.methods.codemerge.config import VARIANTS
from paperline.metrics import validate_metrics
from paperline.nn.vit import CheckpointMismatchError, ViT, save_classifier
from tasks import track
from tests.conftest import finished_flow_runs, report_rows, vit_source_copy


def _tiny(project) -> dict:
    return yaml.safe_load((project / "params" / "codemerge.yaml").read_text())["codemerge"]["profiles"]["tiny"]


def test_tiny_dag_outputs(dag):
    record = json.loads((dag / "data" / "vit_source" / "source.json").read_text())
    assert record["source"] == "digits" and 0 <= record["test_accuracy"] <= 1 and len(record["fingerprint"]) > 8
    path = dag / "results" / "codemerge.json"
    metrics = validate_metrics(json.loads(path.read_text()), str(path))
    assert list(metrics.rows) == list(VARIANTS) and metrics.profile == "tiny" and metrics.baseline == "source"
    seeds = _tiny(dag)["seeds"]
    for row in metrics.rows.values():
        assert 0 <= row["online_accuracy"] <= 1 and 0 <= row["collapsed_seeds"] <= len(seeds) == row["seeds"]
    h = metrics.headline
    assert h["merge_forward_passes_ratio_vs_mos"] < 1  # one fingerprint a checkpoint vs a pass of each
    for key in ("online_gain_vs_pl", "online_gain_vs_tent", "online_gain_vs_ema", "online_gain_vs_mos",
                "merge_seconds_ratio_vs_mos"):
        assert isinstance(h[key], float), key
    assert not any("claim" in k for k in h)
    from paperline.methods.codemerge.claims import SPECS

    claims = {c.name: c for c in metrics.claims}
    assert claims and set(claims) <= {s.name for s in SPECS} and any(c.trivial for c in claims.values())
    assert all(c.seeds == len(seeds) for c in claims.values())
    assert claims["codemerge_above_source"].effect == pytest.approx(h["online_gain_vs_source"])
    assert sorted(report_rows(dag, "codemerge")) == sorted(VARIANTS)

    parent, children = finished_flow_runs(dag, "codemerge")
    assert [d.dataset.digest for d in parent.inputs.dataset_inputs] != ["generated"]  # versioned by content
    assert sorted(r.data.tags["variant"] for r in children) == sorted(VARIANTS)
    c = track.client()
    batches = _tiny(dag)["stream"]["batches"]
    for child in children:
        assert child.info.status == "FINISHED"
        variant = child.data.tags["variant"]
        row = metrics.rows[variant]
        assert child.data.metrics["online_accuracy"] == pytest.approx(row["online_accuracy"])
        nested = c.search_runs([parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{child.info.run_id}'")
        assert sorted(r.data.tags["variant"] for r in nested) == sorted(f"{variant}/seed{s}" for s in seeds)
        for run in nested:  # each seed's stream on its own run
            assert len(c.get_metric_history(run.info.run_id, "accuracy_per_batch")) == batches
    pngs = [a.path for a in c.list_artifacts(parent.info.run_id, "plots") if a.path.endswith(".png")]
    assert sorted(p.name for p in (dag / "plots" / "codemerge").glob("*.png")) == sorted(p.rsplit("/", 1)[-1] for p in pngs)
    assert (dag / "plots" / "codemerge" / "online_accuracy.csv").read_text().startswith("batch,source,tent")
    assert json.loads((dag / "models" / "codemerge" / "run.json").read_text())["complete"]
    assert all((dag / "models" / "codemerge" / "codemerge" / f"seed{s}" / "stream.pt").is_file() for s in seeds)


def test_refused_inputs_name_the_file(dag, tmp_path):
    from tasks import codemerge

    cfg_here = vit_source_copy(dag, tmp_path)
    folder = tmp_path / "vit_source"
    method_cfg = codemerge.CodeMergeConfig(**_tiny(dag))
    assert codemerge.data(method_cfg, cfg_here).folder == str(folder)  # the copy is accepted as it is

    with np.load(folder / "images.npz") as z:
        split = {k: z[k] for k in z.files}
    np.savez(folder / "images.npz", **(split | {"test_x": (split["test_x"] * 16).astype(np.uint8)}))
    with pytest.raises(ImageDataError, match=r"images\.npz:test: expected float32 images in \[0, 1\], got dtype uint8"):
        codemerge.data(method_cfg, cfg_here)
    np.savez(folder / "images.npz", **(split | {"test_x": split["test_x"][:, :, :6]}))
    with pytest.raises(ImageDataError, match=r"images\.npz: \(8, 6\) images for a ViT of image_size 8"):
        codemerge.data(method_cfg, cfg_here)

    np.savez(folder / "images.npz", **split)
    save_classifier(folder / "classifier.pt", ViT(dim=24, heads=2, depth=1))
    with pytest.raises(CheckpointMismatchError, match=r"classifier\.pt: the checkpoint does not fit the model: .*"
                                                      r"\(24,\) in the checkpoint, \(16,\) in the model"):
        codemerge.data(method_cfg, cfg_here)
    assert torch.load(folder / "classifier.pt", weights_only=True)["shape"]["dim"] == 24
