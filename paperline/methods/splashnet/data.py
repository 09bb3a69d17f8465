"""Training windows over precomputed features, with the train-time augmentations, and the collate
that CTC needs (spec §b "Windows and training"; emg2qwerty's WindowedEMGDataset).

Each epoch starts the consecutive windows of every session at a fresh random offset (the
jitter). Augmentations are drawn from a generator seeded by (seed, epoch, item), so a run is
reproducible whatever thread it runs in."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch.utils.data import Dataset

from paperline.methods.splashnet.features import SessionFeatures
from paperline.methods.splashnet.transforms import (
    JITTER_FRAMES,
    random_band_rotation,
    spec_augment,
    temporal_alignment_jitter,
)


@dataclass(frozen=True)
class Augment:
    """SpecAugment settings: the baseline's, or ACM's (0 time masks, 2 × 12 bands)."""

    n_time_masks: int = 3
    time_mask_param: int = 25
    n_freq_masks: int = 2
    freq_mask_param: int = 4
    rotation: bool = True
    jitter_frames: int = JITTER_FRAMES


BASELINE_AUGMENT = Augment()
ACM_AUGMENT = Augment(n_time_masks=0, n_freq_masks=2, freq_mask_param=12)


class WindowDataset(Dataset):
    def __init__(self, sessions: Sequence[SessionFeatures], window_frames: int, left_pad: int, right_pad: int,
                 augment: Augment | None, seed: int):
        self.sessions, self.window, self.left, self.right = list(sessions), window_frames, left_pad, right_pad
        self.augment, self.seed = augment, seed
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        g = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
        self.epoch = epoch
        self.items: list[tuple[int, int]] = []
        for s, session in enumerate(self.sessions):
            offset = int(torch.randint(self.window, (1,), generator=g)) if self.augment else 0
            start = self.left + offset
            while start + self.window + self.right <= len(session.features):
                self.items.append((s, start))
                start += self.window
        if not self.items:
            raise ValueError(f"no window of {self.window}+{self.left}+{self.right} frames fits any session")

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int):
        s, start = self.items[i]
        session = self.sessions[s]
        x = torch.from_numpy(session.features[start - self.left:start + self.window + self.right])
        labels = torch.from_numpy(session.labels_between(start, start + self.window))
        if self.augment:
            g = torch.Generator().manual_seed(hash((self.seed, self.epoch, i)) % (2 ** 62))
            a = self.augment
            if a.rotation:
                x = random_band_rotation(x, g)
            x = temporal_alignment_jitter(x, a.jitter_frames, g)
            x = spec_augment(x, a.n_time_masks, a.time_mask_param, a.n_freq_masks, a.freq_mask_param, g)
        return x, labels


def collate(batch):
    """Stack equal-length windows time-first (T, N, 2, 16, F); targets concatenated for CTC."""
    inputs = torch.stack([x for x, _ in batch], dim=1)
    targets = torch.cat([y for _, y in batch]).long()
    return {"inputs": inputs, "input_lengths": torch.full((len(batch),), inputs.shape[0], dtype=torch.long),
            "targets": targets, "target_lengths": torch.tensor([len(y) for _, y in batch], dtype=torch.long)}
