"""The spurious task and the paper profile's inputs: patch agreement and the balanced test groups,
worst-group accuracy, the rows over seeds and the headline's paired gaps, an image folder and a local ViT by
path (written here) run end to end, and refused inputs naming the path or key before training."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from paperline.data.images import ImageDataError
from paperline.methods.fvae_lora.config import FvaeLoraConfig, TaskConfig
from paperline.methods.fvae_lora.data import add_patch, clean_split, group_accuracy, read_image_folder, spurious_task
from paperline.methods.fvae_lora.summary import headline, row


def _split(n=400, size=8, classes=10, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.random((n, size, size)).astype(np.float32) * 0.5
    y = rng.integers(0, classes, n)
    return clean_split(x, y, TaskConfig(train_fraction=0.5), 0, "random")


def test_training_patches_agree_with_y_at_the_rate_and_the_test_groups_are_balanced():
    split = _split(n=4000)
    task = spurious_task(split, TaskConfig(agreement=0.9, patch=2), seed=3)
    assert np.array_equal(task.train_y, (split.train_y >= 5).astype(int))
    assert abs((task.train_a == task.train_y).mean() - 0.9) < 0.02
    patched = (task.train_x[:, :2, :2] == 1.0).all(axis=(1, 2))
    assert np.array_equal(patched, task.train_a == 1)
    counts = {(y, a): int(((task.test_y == y) & (task.test_a == a)).sum()) for y in (0, 1) for a in (0, 1)}
    assert len(set(counts.values())) == 1 and counts[(0, 0)] > 0
    assert np.array_equal((task.test_x[:, :2, :2] == 1.0).all(axis=(1, 2)), task.test_a == 1)
    np.testing.assert_array_equal(add_patch(task.test_x, np.zeros(len(task.test_x)), 2), task.test_x)


def test_group_and_worst_group_accuracy():
    y = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    a = np.array([0, 0, 1, 1, 0, 0, 1, 1])
    pred = np.array([0, 0, 1, 0, 0, 0, 1, 1])  # follows the patch in half of (0, 1), all of (1, 0)
    out = group_accuracy(pred, y, a)
    assert out["accuracy"] == 5 / 8 and out["group_y0_a1"] == 0.5 and out["group_y1_a0"] == 0.0
    assert out["worst_group_accuracy"] == 0.0


def test_rows_over_seeds_and_the_headline_gaps():
    cfg = FvaeLoraConfig(variants=["lora", "fvae_lora", "fvae_m0"], seeds=[1, 2, 3])

    def result(acc, wg):
        return {"metrics": {"accuracy": acc, "worst_group_accuracy": wg, "train_accuracy": 1.0, "train_seconds": 1.0,
                            "trainable_parameters": 10, "inference_parameters": 8,
                            **{f"group_y{y}_a{a}": wg for y in (0, 1) for a in (0, 1)}},
                "history": {"ce": [1.0]}}

    results = {"lora": {1: result(0.80, 0.50), 2: result(0.82, 0.60), 3: result(0.81, 0.55)},
               "fvae_lora": {1: result(0.81, 0.60), 2: result(0.82, 0.62), 3: result(0.80, 0.66)},
               "fvae_m0": {1: result(0.8, 0.5), 2: result(0.8, 0.5), 3: result(0.8, 0.5)}}
    rows = {v: row(cfg, results[v]) for v in cfg.variants}
    assert rows["lora"]["worst_group_accuracy"] == pytest.approx(0.55)
    assert rows["lora"]["worst_group_accuracy_std"] == pytest.approx(0.05)  # sample std (ddof 1)
    assert rows["fvae_m0"]["accuracy_std"] == pytest.approx(0, abs=1e-12) and rows["lora"]["seeds"] == 3
    h = headline(cfg, rows, results)
    assert h["worst_group_gain_vs_lora"] == pytest.approx(np.mean([0.10, 0.02, 0.11]))
    assert h["seeds_fvae_worst_group_ge_lora"] == 3 and not any("claim" in k for k in h)
    assert h["fvae_m0_worst_group_vs_fvae_lora"] == pytest.approx(0.5 - np.mean([0.60, 0.62, 0.66]))


def _write_folder(root, classes=4, per_class=12, size=10):
    from PIL import Image

    rng = np.random.default_rng(0)
    for k in range(classes):
        (root / f"class{k}").mkdir(parents=True)
        for i in range(per_class):
            img = (rng.random((size, size)) * 60 + 40 * k).astype(np.uint8)
            Image.fromarray(img).save(root / f"class{k}" / f"{i}.png")


def test_an_image_folder_and_a_local_vit_by_path_run_end_to_end(tmp_path):
    """The library steps the flow's `data` task chains: the folder read at the model's input size,
    the clean split, the adapter's targets checked against the backbone."""
    from paperline.methods.fvae_lora.adapter import check_targets
    from paperline.methods.fvae_lora.data import load_source
    from paperline.methods.fvae_lora.train import adapt, image_size_of, load_backbone
    from paperline.nn.vit import ViT, save_classifier

    _write_folder(tmp_path / "images")
    x, y, classes = read_image_folder(tmp_path / "images", 8)
    assert x.shape == (48, 8, 8) and x.dtype == np.float32 and classes == [f"class{k}" for k in range(4)]
    assert list(np.bincount(y)) == [12] * 4 and 0 <= x.min() and x.max() <= 1
    torch.manual_seed(0)
    save_classifier(tmp_path / "vit.pt", ViT(image_size=8, patch_size=4, dim=8, depth=1, heads=2, num_classes=4))
    cfg = FvaeLoraConfig(variants=["lora", "fvae_lora"], seeds=[1],
                         task={"source": "folder", "folder": str(tmp_path / "images"), "threshold": None,
                               "train_fraction": 0.5},
                         backbone={"model": str(tmp_path / "vit.pt")},
                         adapter={"rank": 2, "alpha": 2, "target_modules": ["qkv"]},
                         fvae={"encoder_hidden": 2, "decoder_hidden": 4},
                         train={"epochs": 1, "batch_size": 8})
    backbone = load_backbone(tmp_path / "vit.pt")
    x, y, source = load_source(cfg.task, image_size_of(backbone))  # the folder read at the model's input size
    split = clean_split(x, y, cfg.task, cfg.seed, source)
    assert split.train_x.shape[1:] == (8, 8) and split.classes == 4
    where = "fvae_lora.adapter.target_modules"
    assert check_targets(backbone, cfg.adapter.target_modules, cfg.adapter.rank, where) == ["blocks.0.attn.qkv"]
    task = spurious_task(split, cfg.task, 1)
    assert set(task.train_y) == {0, 1}  # y = the upper half of the 4 classes
    for v in cfg.variants:
        out = adapt(cfg, v, backbone, task, 1)
        assert 0 <= out["metrics"]["worst_group_accuracy"] <= out["metrics"]["accuracy"] <= 1
    fvae = adapt(cfg, "fvae_lora", backbone, task, 1)
    assert fvae["metrics"]["inference_parameters"] < fvae["metrics"]["trainable_parameters"]

    # refused before any training, naming the key or the path
    with pytest.raises(ValueError, match=r"fvae_lora.adapter.target_modules: 'fc1' matches no nn.Linear"):
        check_targets(backbone, ["fc1"], cfg.adapter.rank, where)
    with pytest.raises(ValueError, match=r"rank 9 is above the width 8 of layer 'blocks.0.attn.qkv'"):
        check_targets(backbone, cfg.adapter.target_modules, 9, where)
    (tmp_path / "images" / "class0" / "broken.png").write_text("not an image")
    with pytest.raises(ImageDataError, match="broken.png: not a readable image"):
        read_image_folder(tmp_path / "images", 8)
    with pytest.raises(ImageDataError, match="nowhere: no such image folder"):
        read_image_folder(tmp_path / "nowhere", 8)
    (tmp_path / "notamodel.pt").write_bytes(b"garbage")
    with pytest.raises(Exception, match="notamodel.pt: not a readable torch checkpoint"):
        load_backbone(tmp_path / "notamodel.pt")
