"""Figures of a Model Shapley run and the tables DVC plots read; each writes one file atomically."""
from __future__ import annotations

import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from paperline.io import atomic_path  # noqa: E402
from paperline.metrics import MethodMetrics  # noqa: E402
from paperline.plots import save_figure  # noqa: E402


def plot_pruning(metrics: MethodMetrics, model: str, key: str, label: str, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for variant, curves in metrics.details["curves"].items():
        curve = curves[model]
        ax.plot(curve["fraction"], curve[key], "o-", ms=3, lw=2 if variant == "model_shapley" else 1, label=variant)
    ax.set(xlabel="fraction of neurons removed (least important first)", ylabel=label)
    if key == "perplexity":
        ax.set_yscale("log")
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def plot_phi_vs_ground_truth(metrics: MethodMetrics, scores: dict, path: Path) -> Path:
    """Each neuron's −Φ (Model Shapley) against its permutation-sampled Shapley value."""
    gt = metrics.details["ground_truth"]
    fig, ax = plt.subplots(figsize=(4, 3.5))
    ax.errorbar(gt["phi"], [-p for p in scores["val"]["phi"]], xerr=gt["stderr"], fmt="o", ms=3, lw=0.6)
    ax.set(xlabel="ground truth φ (v = −val loss)", ylabel="−Φ closed form",
           title=f"Spearman {metrics.rows.get('model_shapley', {}).get('spearman_vs_shapley', float('nan')):.3f}")
    return save_figure(fig, path)


def write_tables(metrics: MethodMetrics, directory: Path) -> list[Path]:
    """pruning_digits.csv (accuracy) and pruning_lm.csv (perplexity): a column `fraction` and one
    column per variant (wide, for `dvc plots`)."""
    paths = []
    for name, model, key in (("pruning_digits.csv", "digits", "accuracy"), ("pruning_lm.csv", "lm", "perplexity")):
        curves = {v: c[model] for v, c in metrics.details["curves"].items()}
        fractions = next(iter(curves.values()))["fraction"]
        path = Path(directory) / name
        with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["fraction", *curves])
            for i, f in enumerate(fractions):
                writer.writerow([f, *(c[key][i] for c in curves.values())])
        paths.append(path)
    return paths


def write_all(metrics: MethodMetrics, scores: dict, directory: Path) -> list[Path]:
    directory = Path(directory)
    return [plot_pruning(metrics, "digits", "accuracy", "digits test accuracy", directory / "pruning_digits.png"),
            plot_pruning(metrics, "lm", "perplexity", "LM validation perplexity", directory / "pruning_lm.png"),
            plot_phi_vs_ground_truth(metrics, scores, directory / "phi_vs_ground_truth.png"),
            *write_tables(metrics, directory)]
