"""Seeded image corruptions and the changing-corruption test stream (spec (e)). Images are
(N, H, W) float arrays in [0, 1]; every corruption returns the same shape, clipped to [0, 1]."""
from __future__ import annotations

import numpy as np

from paperline.data.images import check_images
from paperline.methods.codemerge.config import StreamConfig


def gaussian_noise(x: np.ndarray, std: float, rng: np.random.Generator) -> np.ndarray:
    return np.clip(x + rng.normal(0.0, std, x.shape), 0, 1).astype(x.dtype)


def pixel_dropout(x: np.ndarray, p: float, rng: np.random.Generator) -> np.ndarray:
    return (x * (rng.random(x.shape) >= p)).astype(x.dtype)


def gaussian_kernel(sigma: float) -> np.ndarray:
    radius = max(1, int(np.ceil(2 * sigma)))
    t = np.arange(-radius, radius + 1)
    k = np.exp(-t ** 2 / (2 * sigma ** 2))
    return k / k.sum()


def blur(x: np.ndarray, sigma: float) -> np.ndarray:
    """Separable Gaussian blur with zero padding (the digits' background is 0)."""
    k = gaussian_kernel(sigma)
    r = len(k) // 2
    padded = np.pad(x, ((0, 0), (r, r), (0, 0)))
    rows = sum(k[i] * padded[:, i:i + x.shape[1], :] for i in range(len(k)))
    padded = np.pad(rows, ((0, 0), (0, 0), (r, r)))
    return np.clip(sum(k[i] * padded[:, :, i:i + x.shape[2]] for i in range(len(k))), 0, 1).astype(x.dtype)


def contrast(x: np.ndarray, c: float) -> np.ndarray:
    mean = x.mean(axis=(1, 2), keepdims=True)
    return np.clip(mean + c * (x - mean), 0, 1).astype(x.dtype)


def corrupt(x: np.ndarray, name: str, cfg: StreamConfig, rng: np.random.Generator) -> np.ndarray:
    if name == "gaussian_noise":
        return gaussian_noise(x, cfg.noise_std, rng)
    if name == "pixel_dropout":
        return pixel_dropout(x, cfg.dropout_p, rng)
    if name == "blur":
        return blur(x, cfg.blur_sigma)
    if name == "contrast":
        return contrast(x, cfg.contrast)
    raise ValueError(f"unknown corruption {name!r}")


def corruption_of(batch: int, cfg: StreamConfig) -> str:
    return cfg.corruptions[(batch // cfg.segment_batches) % len(cfg.corruptions)]


def make_stream(images: np.ndarray, labels: np.ndarray, cfg: StreamConfig, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(x (batches, B, H, W) float32, y (batches, B) int64): the same stream for every variant."""
    check_images(images, labels, where="stream pool")
    if len(images) == 0:
        raise ValueError("stream pool: no held-out images")
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for t in range(cfg.batches):
        idx = rng.integers(0, len(images), cfg.batch_size)
        xs.append(corrupt(images[idx].astype(np.float32), corruption_of(t, cfg), cfg, rng))
        ys.append(labels[idx])
    return np.stack(xs).astype(np.float32), np.stack(ys).astype(np.int64)
