"""CIFAR-10 / CIFAR-100 in their "python version" format (the tarballs from
https://www.cs.toronto.edu/~kriz/cifar.html, unpacked):

    cifar-10-batches-py/   data_batch_1 … data_batch_5, test_batch
    cifar-100-python/      train, test

Each file is a pickle of a dict with b"data" (N × 3072 uint8: the red, green, then blue 32×32
planes of each image, row-major) and b"labels" (CIFAR-10) or b"fine_labels" (CIFAR-100).
Unpickling runs code from the file: open only data you trust.
"""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from paperline.io import DataError, one_line

FILES = {"cifar10": (["data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5"],
                     ["test_batch"]),
         "cifar100": (["train"], ["test"])}
LABEL_KEY = {"cifar10": b"labels", "cifar100": b"fine_labels"}
CLASSES = {"cifar10": 10, "cifar100": 100}
# per-channel mean and std of the CIFAR-10 training images (the usual normalization)
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)


def read_batch(path: Path, dataset: str) -> tuple[np.ndarray, np.ndarray]:
    """(images (N, 3, 32, 32) uint8, labels (N,) int64) of one pickled batch file."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such CIFAR batch file")
    try:
        with open(path, "rb") as fh:
            batch = pickle.load(fh, encoding="bytes")
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, ImportError, IndexError) as err:
        raise DataError(f"{path}: not a CIFAR python-format batch ({one_line(err)})") from err
    key = LABEL_KEY[dataset]
    if not isinstance(batch, dict) or b"data" not in batch or key not in batch:
        raise DataError(f"{path}: expected a dict with b'data' and {key!r} ({dataset})")
    data = np.asarray(batch[b"data"], dtype=np.uint8)
    labels = np.asarray(batch[key], dtype=np.int64)
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or len(labels) != len(data):
        raise DataError(f"{path}: b'data' must be N × 3072 with N labels "
                        f"(got data {data.shape}, {len(labels)} labels)")
    if labels.size and (labels.min() < 0 or labels.max() >= CLASSES[dataset]):
        raise DataError(f"{path}: labels outside 0..{CLASSES[dataset] - 1}")
    return data.reshape(-1, 3, 32, 32), labels


def load_cifar(directory: str | Path, dataset: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train images, train labels, test images, test labels) from an unpacked CIFAR directory."""
    if dataset not in FILES:
        raise ValueError(f"unknown CIFAR dataset {dataset!r}; expected one of {', '.join(FILES)}")
    directory = Path(directory)
    train_files, test_files = FILES[dataset]
    train = [read_batch(directory / f, dataset) for f in train_files]
    test = [read_batch(directory / f, dataset) for f in test_files]
    return (np.concatenate([x for x, _ in train]), np.concatenate([y for _, y in train]),
            np.concatenate([x for x, _ in test]), np.concatenate([y for _, y in test]))


def write_batch(path: str | Path, images: np.ndarray, labels: np.ndarray, dataset: str) -> None:
    """Write images (N, 3, 32, 32) uint8 and labels as one batch file of the real format (tests
    and examples use it; it is the layout load_cifar reads)."""
    obj = {b"data": np.asarray(images, dtype=np.uint8).reshape(len(images), -1),
           LABEL_KEY[dataset]: [int(y) for y in labels], b"batch_label": b"written by paperline"}
    with open(path, "wb") as fh:
        pickle.dump(obj, fh, protocol=2)
