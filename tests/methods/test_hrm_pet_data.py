"""HRM-PET's task sequences and run metrics: seeded class splits relabelled task by task, per-class
train/test splits, resizing to the backbone, the refused inputs (a wrong image array, a split that
leaves a task or a class empty) named, and A_N / forgetting on hand-made accuracy records."""
from __future__ import annotations

import numpy as np
import pytest

from paperline.data.images import ImageDataError
from paperline.methods.hrm_pet.config import HrmPetConfig, SequenceConfig
from paperline.methods.hrm_pet.data import TaskSplitError, build_sequence, resize, split_tasks
from paperline.methods.hrm_pet.evaluate import final_average_accuracy, forgetting, run_metrics


def _images(n_per_class: int = 10, classes: int = 6, size: int = 16):
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(classes), n_per_class)
    return rng.uniform(0, 1, size=(len(y), size, size)).astype(np.float32), y


def test_sequence_is_seeded_relabelled_and_split_per_class():
    x, y = _images()
    cfg = SequenceConfig(name="s", source="digits", tasks=3, train_fraction=0.7)
    a, b = build_sequence(x, y, cfg, 8, seed=4), build_sequence(x, y, cfg, 8, seed=4)
    assert a.task_classes == [[0, 1], [2, 3], [4, 5]] and a.class_task().tolist() == [0, 0, 1, 1, 2, 2]
    assert np.array_equal(a.train_x, b.train_x) and np.array_equal(a.test_y, b.test_y)
    assert a.train_x.shape == (42, 8, 8) and a.test_x.shape == (18, 8, 8) and a.train_x.dtype == np.float32
    assert np.bincount(a.train_y).tolist() == [7] * 6
    c = build_sequence(x, y, cfg, 8, seed=5)
    assert not np.array_equal(a.test_x, c.test_x)  # another seed, another class order and split
    groups = split_tasks(y, 3, 4, "s")
    # the relabelled images of task 0 are those of the original classes the seeded order put first
    first = np.isin(y, groups[0])
    assert sorted(resize(x[first], 8).sum(axis=(1, 2)).round(4)) == sorted(
        np.concatenate([a.train_x[a.train_y < 2], a.test_x[a.test_y < 2]]).sum(axis=(1, 2)).round(4))


def test_resize_averages_areas():
    img = np.zeros((1, 4, 4), np.float32)
    img[0, :2, :2] = 1.0
    assert resize(img, 2)[0].tolist() == [[1.0, 0.0], [0.0, 0.0]]
    assert resize(img, 4) is not img and resize(img, 4).dtype == np.float32


def test_refused_inputs_are_named():
    x, y = _images()
    cfg = SequenceConfig(name="s", source="digits", tasks=3)
    with pytest.raises(TaskSplitError, match=r"sequence 's' \(digits\): 7 tasks for 6 classes leaves a task empty"):
        build_sequence(x, y, cfg.model_copy(update={"tasks": 7}), 8, 0)
    with pytest.raises(ImageDataError, match=r"sequence 's' \(digits\): expected float32 images in \[0, 1\], got dtype uint8"):
        build_sequence((x * 255).astype(np.uint8), y, cfg, 8, 0)
    with pytest.raises(ImageDataError, match=r"expected images of shape \(N, H, W\), got shape \(60, 16, 16, 3\)"):
        build_sequence(np.repeat(x[..., None], 3, axis=3), y, cfg, 8, 0)
    with pytest.raises(TaskSplitError, match=r"class \d has 1 images: too few for a train/test split"):
        build_sequence(x[:51], y[:51], cfg, 8, 0)


def test_config_refuses_a_run_without_its_baseline_or_with_repeats():
    seq = {"name": "s", "source": "digits"}
    with pytest.raises(ValueError, match="must include 'frozen_head'.*'hide_lora'"):
        HrmPetConfig(sequences=[seq], variants=["frozen_head", "hrm_pet"])
    with pytest.raises(ValueError, match="must include 'frozen_head'"):
        HrmPetConfig(sequences=[seq], variants=["hide_lora", "hrm_pet"])
    with pytest.raises(ValueError, match="sequences repeat a name"):
        HrmPetConfig(sequences=[seq, seq])
    minimal = HrmPetConfig(sequences=[seq], variants=["frozen_head", "hide_lora", "hrm_pet"])
    assert minimal.learners() == ["plain", "ctird", "ctird_code"]


def test_final_average_accuracy_and_forgetting():
    records = [{"accuracy_per_task": [0.9]}, {"accuracy_per_task": [0.8, 0.7]},
               {"accuracy_per_task": [0.6, 0.75, 0.5]}]
    assert final_average_accuracy(records) == pytest.approx((0.6 + 0.75 + 0.5) / 3)
    # task 0: best 0.9 before the last task, now 0.6; task 1: best 0.7, now 0.75 (a gain: −0.05)
    assert forgetting(records) == pytest.approx(((0.9 - 0.6) + (0.7 - 0.75)) / 2)
    assert forgetting(records[:1]) == 0.0
    last = {"matching": 0.8, "initial_matching": 0.7, "extra_passes": 0.25, "drm_rematched": 0.1,
            "crm_flagged": 0.2, "crm_switched": 0.05, "oracle_accuracy_per_task": [1.0, 0.5, 0.75], "absorbed": 0.3}
    m = run_metrics([r | last for r in records])
    assert m["forward_passes"] == 2.25 and m["matching"] == 0.8 and m["oracle_final_accuracy"] == 0.75
    # without LoRA (the frozen head): one pass, and no LoRA oracle or absorption to report
    no_lora = {k: v for k, v in last.items() if k not in ("oracle_accuracy_per_task", "absorbed")}
    m = run_metrics([r | no_lora | {"base_passes": 1, "extra_passes": 0.0} for r in records])
    assert m["forward_passes"] == 1 and "oracle_final_accuracy" not in m and "absorbed" not in m


def test_fashion_mnist_is_the_committed_subsample_and_a_missing_file_is_an_error(monkeypatch, tmp_path):
    """The second sequence's source ships with the repository (issue 38: a fresh clone silently fell
    back to digits when a Debian package was missing); without it the run stops, naming the file."""
    from paperline.data import images
    from paperline.methods.hrm_pet.data import load_source

    x, y = load_source(SequenceConfig(name="f", source="fashion_mnist"))
    assert x.shape == (5000, 28, 28) and x.dtype == np.float32 and np.bincount(y).tolist() == [500] * 10
    missing = tmp_path / "fashion_mnist_subsample.npz"
    monkeypatch.setattr(images, "FASHION_MNIST_FILE", missing)
    with pytest.raises(ImageDataError, match=f"{missing}: missing"):
        load_source(SequenceConfig(name="f", source="fashion_mnist"))
    with pytest.raises(ValueError, match="fallback"):  # no fallback to name any more
        SequenceConfig(name="f", source="fashion_mnist", fallback="digits")
