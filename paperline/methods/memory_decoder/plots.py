"""Figures and `dvc plots` tables of the Memory Decoder comparison (every figure through
paperline.plots)."""
from __future__ import annotations

import csv
from pathlib import Path

from paperline.io import atomic_path
from paperline.methods.memory_decoder.pipeline import BASES
from paperline.plots import save_figure


def plot_lambda_sweep(metrics, path: Path) -> Path:
    """Domain and general perplexity vs λ, for each base with kNN-LM and with the same MemDec."""
    import matplotlib.pyplot as plt

    lambdas, sweeps = metrics.details["lambdas"], metrics.details["ppl_by_lambda"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, split in zip(axes, ("domain", "general")):
        for size, style in zip(BASES, ("--", "-")):
            for variant, colour in (("knn_lm", "tab:orange"), ("memdec", "tab:blue")):
                sweep = sweeps[f"{size}/{variant}"][split]
                ax.plot(lambdas, [sweep[str(lam)] for lam in lambdas], style, color=colour, marker="o",
                        label=f"{size} base + {variant}")
        ax.set_xlabel("λ (weight of p_kNN or p_MemDec)")
        ax.set_ylabel(f"{split} perplexity")
        ax.set_yscale("log")
        ax.set_title(f"{split} held-out text (λ = 0: the base alone)")
        ax.legend(fontsize=8)
    save_figure(fig, path)
    return path


def write_tables(metrics, out: Path) -> list[Path]:
    """perplexity_vs_lambda.csv: one row per λ, a column per (base, method, split)."""
    path = out / "perplexity_vs_lambda.csv"
    sweeps = metrics.details["ppl_by_lambda"]
    columns = [(size, variant, split) for size in BASES for variant in ("knn_lm", "memdec")
               for split in ("domain", "general")]
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["lambda", *("_".join(c) for c in columns)])
        for lam in metrics.details["lambdas"]:
            writer.writerow([lam, *(sweeps[f"{size}/{variant}"][split][str(lam)] for size, variant, split in columns)])
    return [path]


def write_all(metrics, directory: Path) -> list[Path]:
    """Every figure (PNG) and `dvc plots` table (CSV) of a run, into `directory`."""
    directory = Path(directory)
    return [plot_lambda_sweep(metrics, directory / "perplexity_vs_lambda.png")] + write_tables(metrics, directory)
