"""Figures and the `dvc plots` table of the QFFT comparison (every figure through paperline.plots)."""
from __future__ import annotations

import csv
from pathlib import Path

from paperline.io import atomic_path
from paperline.plots import save_figure

COLUMNS = ("easy_accuracy", "hard_accuracy", "easy_long_cot_rate", "hard_long_cot_rate",
           "all_mean_length", "rak", "aes", "all_accuracy_std", "rak_std", "aes_std")


def plot_comparison(rows: dict, models, path: Path) -> Path:
    """Per model: accuracy and long-CoT rate on easy and hard questions, and mean response length;
    means over the seeds, the bars' whiskers their spread (std)."""
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    x = np.arange(len(models))
    for ax, metric, title in ((axes[0], "accuracy", "accuracy"), (axes[1], "long_cot_rate", "long-CoT rate (\"Wait\")")):
        for offset, split, colour in ((-0.2, "easy", "tab:green"), (0.2, "hard", "tab:red")):
            ax.bar(x + offset, [rows[m].get(f"{split}_{metric}", np.nan) for m in models], 0.4,
                   yerr=[rows[m].get(f"{split}_{metric}_std", 0.0) for m in models], capsize=2, color=colour, label=f"{split} (base {'right' if split == 'easy' else 'wrong'})")
        ax.set_title(title)
        ax.set_ylim(0, 1.05)
        ax.legend(fontsize=8)
    axes[2].bar(x, [rows[m]["all_mean_length"] for m in models],
                yerr=[rows[m].get("all_mean_length_std", 0.0) for m in models], capsize=2, color="tab:blue")
    axes[2].set_title("mean response length (tokens)")
    for ax in axes:
        ax.set_xticks(x, models, rotation=30, ha="right")
    save_figure(fig, path)
    return path


def write_table(rows: dict, models, path: Path) -> Path:
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["model", *COLUMNS])
        for m in models:
            writer.writerow([m, *(rows[m].get(c, "") for c in COLUMNS)])
    return path


def write_all(metrics, directory: Path) -> list[Path]:
    """The comparison's figure (PNG) and `dvc plots` table (CSV), into `directory`."""
    directory = Path(directory)
    return [plot_comparison(metrics.rows, list(metrics.rows), directory / "qfft_comparison.png"),
            write_table(metrics.rows, list(metrics.rows), directory / "qfft_comparison.csv")]
