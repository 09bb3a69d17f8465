"""Figures of a GeoAda run and the table `dvc plots` reads. Each function writes one file."""
from __future__ import annotations

import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from paperline.io import atomic_path  # noqa: E402
from paperline.methods.geoada.config import GeoAdaConfig  # noqa: E402
from paperline.plots import save_figure  # noqa: E402


def plot_ade(cfg: GeoAdaConfig, rows: dict[str, dict], path: Path) -> Path:
    """New-task ADE (average over K samples) and original-task ADE after fine-tuning with the
    variant's additions off and on, per variant, one panel per control type."""
    fig, axes = plt.subplots(1, len(cfg.controls), figsize=(4.5 * len(cfg.controls), 3.4), squeeze=False)
    for ax, control in zip(axes[0], cfg.controls):
        variants = [v for c, v in cfg.pairs if c == control]
        xs = np.arange(len(variants))
        new = [rows[f"{control}_{v}"]["ade"] for v in variants]
        off = [rows[f"{control}_{v}"]["original_ade"] for v in variants]
        on = [rows[f"{control}_{v}"]["original_on_ade"] for v in variants]
        ax.bar(xs - 0.27, new, 0.27, label="new task")
        ax.bar(xs, off, 0.27, label="original task, additions off")
        ax.bar(xs + 0.27, on, 0.27, label="original task, additions on")
        ax.set_xticks(xs, variants, rotation=30, fontsize=7)
        ax.set(title=f"{control} control", ylabel="ADE (mean of K samples)")
        ax.legend(fontsize=7)
    return save_figure(fig, path)


def plot_losses(curves: dict[str, dict], path: Path) -> Path:
    """The fine-tuning curves (means over seeds): the training loss and, where there was one, the
    loss on the held-out validation set, per row."""
    panels = [("loss", "training")] + ([("validation_loss", "validation")]
                                       if any("validation_loss" in c for c in curves.values()) else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 3.4), squeeze=False)
    for ax, (key, title) in zip(axes[0], panels):
        for name, c in curves.items():
            if key in c:
                ax.plot(c["step"], c[key], marker=".", lw=2 if name.endswith("geoada") else 1, label=name)
        ax.set(xlabel="fine-tuning step", ylabel="ε-prediction loss", yscale="log", title=title)
        ax.legend(fontsize=6, ncol=2)
    return save_figure(fig, path)


def write_ade_table(rows: dict[str, dict], path: Path) -> Path:
    """ade.csv: variant rows with the new- and original-task ADE/FDE (the latter additions off and on; dvc plots)."""
    columns = ["ade", "fde", "min_ade", "min_fde", "original_ade", "original_fde", "original_on_ade", "original_on_fde"]
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["row", *columns])
        for name, row in rows.items():
            writer.writerow([name, *(f"{row[c]:.6g}" for c in columns)])
    return path


def write_all(cfg: GeoAdaConfig, rows: dict[str, dict], curves: dict[str, dict], directory: Path) -> list[Path]:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = [plot_ade(cfg, rows, directory / "ade.png"), write_ade_table(rows, directory / "ade.csv")]
    if curves:
        paths.append(plot_losses(curves, directory / "finetune_loss.png"))
    return paths
