"""Figures of a CodeMerge run and the tables `dvc plots` reads. Each function writes one file."""
from __future__ import annotations

import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from paperline.io import atomic_path  # noqa: E402
from paperline.methods.codemerge.config import CodeMergeConfig  # noqa: E402
from paperline.methods.codemerge.corruptions import corruption_of  # noqa: E402
from paperline.plots import save_figure  # noqa: E402


def running_mean(values: list[float], window: int) -> np.ndarray:
    v = np.asarray(values, dtype=float)
    c = np.cumsum(np.insert(v, 0, 0.0))
    lo = np.maximum(np.arange(1, len(v) + 1) - window, 0)
    return (c[1:] - c[lo]) / (np.arange(1, len(v) + 1) - lo)


def plot_online_accuracy(cfg: CodeMergeConfig, accuracy: dict[str, list[float]], path: Path) -> Path:
    """The student's accuracy per batch (mean over seeds; running mean over a segment), corruption
    segments shaded."""
    fig, ax = plt.subplots(figsize=(8, 3.6))
    n = cfg.stream.batches
    for start in range(0, n, cfg.stream.segment_batches):
        if (start // cfg.stream.segment_batches) % 2:
            ax.axvspan(start, min(start + cfg.stream.segment_batches, n), color="0.93", lw=0)
        ax.text(start + 0.3, 0.02, corruption_of(start, cfg.stream)[:5], fontsize=6, color="0.4")
    for v, a in accuracy.items():
        ax.plot(running_mean(a, cfg.stream.segment_batches), lw=2 if v == "codemerge" else 1, label=v)
    ax.set(xlabel="batch of the stream", ylabel=f"accuracy (running mean, {cfg.stream.segment_batches} batches)",
           ylim=(0, 1))
    ax.legend(fontsize=7, ncol=4)
    return save_figure(fig, path)


def plot_merge_cost(rows: dict[str, dict], path: Path) -> Path:
    """Merge seconds and merge forward passes of the bank variants."""
    bank = [v for v, r in rows.items() if r["merges"]]
    fig, axes = plt.subplots(1, 2, figsize=(8, 3))
    for ax, key in zip(axes, ("merge_seconds", "merge_forward_passes")):
        ax.bar(bank, [rows[v][key] for v in bank])
        ax.set(title=key)
        ax.tick_params(axis="x", labelrotation=30, labelsize=7)
    return save_figure(fig, path)


def write_plot_tables(cfg: CodeMergeConfig, accuracy: dict[str, list[float]], rows: dict[str, dict],
                      directory: Path) -> list[Path]:
    """online_accuracy.csv (batch, one running-mean column per variant, mean over seeds) and merge_cost.csv."""
    directory = Path(directory)
    curves = {v: running_mean(a, cfg.stream.segment_batches) for v, a in accuracy.items()}
    paths = [directory / "online_accuracy.csv", directory / "merge_cost.csv"]
    with atomic_path(paths[0]) as tmp, open(tmp, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["batch", *curves])
        for t in range(cfg.stream.batches):
            w.writerow([t, *(round(float(c[t]), 6) for c in curves.values())])
    with atomic_path(paths[1]) as tmp, open(tmp, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["variant", "merge_seconds", "merge_forward_passes"])
        for v, r in rows.items():
            if r["merges"]:
                w.writerow([v, r["merge_seconds"], r["merge_forward_passes"]])
    return paths


def write_all(cfg: CodeMergeConfig, accuracy: dict[str, list[float]], rows: dict[str, dict], directory: Path) -> list[Path]:
    """`accuracy`: variant -> accuracy per batch (mean over seeds)."""
    directory = Path(directory)
    paths = [plot_online_accuracy(cfg, accuracy, directory / "online_accuracy.png")]
    if any(r["merges"] for r in rows.values()):
        paths.append(plot_merge_cost(rows, directory / "merge_cost.png"))
    return paths + write_plot_tables(cfg, accuracy, rows, directory)
