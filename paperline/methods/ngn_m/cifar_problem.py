"""CIFAR-10/100 with a CIFAR ResNet (the paper's NGN-M vision setting): cross-entropy on
minibatches with the standard augmentation (zero-pad 4, random 32×32 crop, horizontal flip).

The images stay on the device as uint8; each epoch's shuffle, crops and flips come from
(seed, epoch) alone, so a run resumed mid-epoch sees the minibatches it would have seen.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from paperline.data.cifar import CLASSES, MEAN, STD, load_cifar
from paperline.methods.ngn_m.base import EpochBatches, Problem
from paperline.methods.ngn_m.config import CifarConfig
from paperline.methods.ngn_m.resnet import CifarResNet as ResNet
from paperline.seeds import seeded_init

TRAIN_EVAL_IMAGES = 10_000  # "loss" is the training loss on this many training images (eval mode)
PAD = 4


@functools.lru_cache(maxsize=2)
def cached_cifar(directory: str, dataset: str):
    """The arrays of one CIFAR directory, read once per process (every run of a sweep uses them)."""
    return load_cifar(directory, dataset)


class CifarResNet(Problem):
    kind = "cifar"

    def __init__(self, cfg: CifarConfig, seed: int, device: torch.device):
        X, y, X_test, y_test = cached_cifar(str(cfg.data_dir), cfg.dataset)
        if cfg.train_limit:
            X, y = X[:cfg.train_limit], y[:cfg.train_limit]
        self.cfg, self.seed, self.device = cfg, seed, device
        self.X, self.y = torch.from_numpy(X).to(device), torch.from_numpy(y).to(device)
        self.X_test, self.y_test = torch.from_numpy(X_test).to(device), torch.from_numpy(y_test).to(device)
        self.mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
        self.std = torch.tensor(STD, device=device).view(1, 3, 1, 1)
        with seeded_init(seed):  # nn.Module init draws from the global RNG; runs train in threads
            self.model = ResNet(cfg.depth, CLASSES[cfg.dataset]).to(device)
        if device.type == "cuda":
            torch.backends.cudnn.benchmark = True  # fixed input shapes: let cuDNN pick its kernels
        self.batches = EpochBatches(len(self.y), cfg.batch_size, seed)
        self.steps_per_epoch = self.batches.steps_per_epoch
        self.total_steps = cfg.epochs * self.steps_per_epoch
        self._aug_epoch = -1
        self._aug: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None  # this epoch's

    def parameters(self):
        return list(self.model.parameters())

    def state_dict(self):
        return self.model.state_dict()

    def load_state_dict(self, state):
        self.model.load_state_dict(state)

    def normalize(self, images: torch.Tensor) -> torch.Tensor:
        return (images.float() / 255.0 - self.mean) / self.std

    def _augmentation(self, epoch: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Crop offsets (dy, dx) in 0..2·PAD and flip flags of every training image this epoch."""
        if epoch != self._aug_epoch:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch + 7)
            n = len(self.y)
            offsets = torch.randint(0, 2 * PAD + 1, (2, n), generator=g)
            flips = torch.rand(n, generator=g) < 0.5
            self._aug_epoch = epoch
            self._aug = (offsets[0].to(self.device), offsets[1].to(self.device), flips.to(self.device))
        assert self._aug is not None  # drawn at the first epoch (0 ≠ −1)
        return self._aug

    def batch(self, step):
        idx = self.batches.indices(step).to(self.device)
        images = self.X[idx]
        if self.cfg.augment:
            dy, dx, flip = (t[idx] for t in self._augmentation(step // self.steps_per_epoch))
            padded = F.pad(images, (PAD, PAD, PAD, PAD))
            rows = (dy[:, None] + torch.arange(32, device=self.device))[:, None, :, None]
            cols = (dx[:, None] + torch.arange(32, device=self.device))[:, None, None, :]
            b = torch.arange(len(idx), device=self.device)[:, None, None, None]
            c = torch.arange(3, device=self.device)[None, :, None, None]
            images = padded[b, c, rows, cols]
            images = torch.where(flip[:, None, None, None], images.flip(3), images)
        return images, self.y[idx]

    def loss(self, batch):
        self.model.train()
        images, labels = batch
        return F.cross_entropy(self.model(self.normalize(images)), labels)

    @torch.no_grad()
    def _score(self, X: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
        self.model.eval()
        total_loss, correct = 0.0, 0
        for i in range(0, len(y), self.cfg.eval_batch_size):
            logits = self.model(self.normalize(X[i:i + self.cfg.eval_batch_size]))
            labels = y[i:i + self.cfg.eval_batch_size]
            total_loss += float(F.cross_entropy(logits, labels, reduction="sum"))
            correct += int((logits.argmax(1) == labels).sum())
        return total_loss / len(y), correct / len(y)

    def evaluate(self):
        train_loss, _ = self._score(self.X[:TRAIN_EVAL_IMAGES], self.y[:TRAIN_EVAL_IMAGES])
        test_loss, accuracy = self._score(self.X_test, self.y_test)
        return {"loss": train_loss, "test_loss": test_loss, "accuracy": accuracy}
