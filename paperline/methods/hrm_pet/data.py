"""Task sequences for class-incremental learning: real offline images (paperline/data/images.py)
resized to the backbone's input, classes split into tasks by a seeded permutation (generated
splits on real data), each class's images split into train/test, and the checks that name a bad
input (a wrong image array, a split that leaves a task empty)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from paperline.data.images import ImageDataError, check_images, load_images
from paperline.methods.hrm_pet.config import SequenceConfig


class TaskSplitError(ImageDataError):
    """A class split that leaves a task without classes or images; the message names the task."""


@dataclass
class TaskSequence:
    name: str
    source: str  # the image source loaded
    task_classes: list[list[int]]  # task -> its labels (global class ids, 0..C-1 after relabelling)
    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray

    @property
    def num_classes(self) -> int:
        return sum(len(c) for c in self.task_classes)

    def class_task(self) -> np.ndarray:
        """class id -> task id."""
        out = np.empty(self.num_classes, dtype=np.int64)
        for t, classes in enumerate(self.task_classes):
            out[classes] = t
        return out

    def task_of(self, labels: np.ndarray) -> np.ndarray:
        return self.class_task()[labels]


def resize(images: np.ndarray, size: int) -> np.ndarray:
    """(N, H, W) in [0, 1] → (N, size, size) by area averaging (adaptive average pooling)."""
    if images.shape[1:] == (size, size):
        return images.astype(np.float32)
    out = F.adaptive_avg_pool2d(torch.as_tensor(images, dtype=torch.float32).unsqueeze(1), size)
    return out.squeeze(1).clamp(0, 1).numpy()


def split_tasks(labels: np.ndarray, tasks: int, seed: int, where: str) -> list[list[int]]:
    """The distinct labels in a seeded order, cut into `tasks` contiguous groups of near-equal size;
    TaskSplitError when a task would get no class."""
    classes = np.unique(labels)
    if tasks > len(classes):
        raise TaskSplitError(f"{where}: {tasks} tasks for {len(classes)} classes leaves a task empty "
                             f"(task {len(classes)} would have no class)")
    order = np.random.default_rng(seed).permutation(classes)
    return [sorted(int(c) for c in part) for part in np.array_split(order, tasks)]


def build_sequence(x: np.ndarray, y: np.ndarray, cfg: SequenceConfig, image_size: int, seed: int,
                   source: str | None = None) -> TaskSequence:
    """A checked task sequence from images `x` (N, H, W) float in [0, 1] and integer labels `y`:
    classes relabelled so task t holds ids [Σ_{s<t} |task s|, …) (the class-to-task map is then
    monotone, as in the benchmarks), each class split train/test by `train_fraction`."""
    where = f"sequence {cfg.name!r} ({source or cfg.source})"
    check_images(x, y, where=where)
    rng = np.random.default_rng(seed)
    if cfg.classes is not None:
        keep = y < cfg.classes
        x, y = x[keep], y[keep]
    if cfg.max_images is not None and cfg.max_images < len(x):
        pick = np.sort(rng.permutation(len(x))[: cfg.max_images])
        x, y = x[pick], y[pick]
    groups = split_tasks(y, cfg.tasks, seed, where)
    relabel = {c: i for i, c in enumerate(c for group in groups for c in group)}
    task_classes, start = [], 0
    for group in groups:
        task_classes.append(list(range(start, start + len(group))))
        start += len(group)
    new_y = np.array([relabel[int(c)] for c in y], dtype=np.int64)
    train, test = [], []
    for c in range(start):
        idx = rng.permutation(np.flatnonzero(new_y == c))
        n_train = int(round(cfg.train_fraction * len(idx)))
        if n_train == 0 or n_train == len(idx):
            raise TaskSplitError(f"{where}: class {c} has {len(idx)} images: too few for a train/test split")
        train.append(idx[:n_train])
        test.append(idx[n_train:])
    train_idx, test_idx = np.concatenate(train), np.concatenate(test)
    small = resize(x, image_size)
    return TaskSequence(cfg.name, source or cfg.source, task_classes, small[train_idx], new_y[train_idx],
                        small[test_idx], new_y[test_idx])


def load_source(cfg: SequenceConfig) -> tuple[np.ndarray, np.ndarray]:
    """(images, labels) of `cfg.source`; a source that cannot be loaded raises ImageDataError naming
    its file, never a silent substitute (another data set would give other figures)."""
    return load_images(cfg.source)
