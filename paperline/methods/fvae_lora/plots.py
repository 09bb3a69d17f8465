"""Figures of an FVAE-LoRA run and the table `dvc plots` reads. Each function writes one file."""
from __future__ import annotations

import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from paperline.io import atomic_path  # noqa: E402
from paperline.methods.fvae_lora.config import FvaeLoraConfig  # noqa: E402
from paperline.plots import save_figure  # noqa: E402


def plot_accuracy(rows: dict[str, dict], path: Path) -> Path:
    """Average and worst-group test accuracy per variant (the text task's text_<variant> after the
    image task's), with their sample std over seeds."""
    fig, ax = plt.subplots(figsize=(max(7.5, 0.9 * len(rows)), 3.4))
    names = list(rows)
    pos = np.arange(len(names))
    for off, key in ((-0.2, "accuracy"), (0.2, "worst_group_accuracy")):
        ax.bar(pos + off, [rows[v][key] for v in names], 0.4, yerr=[rows[v][f"{key}_std"] for v in names],
               capsize=3, label=key.replace("_", " "))
    ax.set_xticks(pos, names, rotation=20, fontsize=8)
    ax.set(ylim=(0, 1), ylabel="balanced test accuracy")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def plot_losses(cfg: FvaeLoraConfig, results: dict, path: Path) -> Path:
    """Per-epoch task cross-entropy (every variant) and FVAE-LoRA's ELBO terms, first seed."""
    seed = cfg.run_seeds()[0]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    for v in cfg.variants:
        axes[0].plot(results[v][seed]["history"]["ce"], label=v)
    axes[0].set(title="task cross-entropy", xlabel="epoch", yscale="log")
    axes[0].legend(fontsize=7)
    for k in ("rec", "kl", "z1", "z2"):
        axes[1].plot(results["fvae_lora"][seed]["history"][k], label=k)
    axes[1].set(title="fvae_lora: per-layer ELBO terms", xlabel="epoch")
    axes[1].legend(fontsize=7)
    return save_figure(fig, path)


def write_table(rows: dict[str, dict], path: Path) -> Path:
    keys = ("accuracy", "accuracy_std", "worst_group_accuracy", "worst_group_accuracy_std")
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["variant", *keys])
        for v, r in rows.items():
            w.writerow([v, *(round(float(r[k]), 6) for k in keys)])
    return path


def write_all(cfg: FvaeLoraConfig, results: dict, rows: dict[str, dict], directory: Path) -> list[Path]:
    directory = Path(directory)
    return [plot_accuracy(rows, directory / "accuracy.png"), plot_losses(cfg, results, directory / "losses.png"),
            write_table(rows, directory / "accuracy.csv")]
