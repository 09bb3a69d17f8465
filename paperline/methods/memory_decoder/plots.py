"""Figures and `dvc plots` tables of the Memory Decoder comparison (every figure through
paperline.plots)."""
from __future__ import annotations

import csv
from pathlib import Path

from paperline.io import atomic_path
from paperline.plots import save_figure


def plot_lambda_sweep(summary: dict, bases, path: Path) -> Path:
    """Domain and general perplexity vs λ, for each base with kNN-LM and with the same MemDec."""
    import matplotlib.pyplot as plt

    lambdas = summary["lambdas"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, split in zip(axes, ("domain", "general")):
        for size, style in zip(bases, ("--", "-")):
            row = summary[size]
            for variant, colour in (("knn_lm", "tab:orange"), ("memdec", "tab:blue")):
                sweep = row[f"{variant}_{split}_ppl_by_lambda"]
                ax.plot(lambdas, [sweep[str(lam)] for lam in lambdas], style, color=colour, marker="o",
                        label=f"{size} base + {variant}")
        ax.set_xlabel("λ (weight of p_kNN or p_MemDec)")
        ax.set_ylabel(f"{split} perplexity")
        ax.set_yscale("log")
        ax.set_title(f"{split} held-out text (λ = 0: the base alone)")
        ax.legend(fontsize=8)
    save_figure(fig, path)
    return path


def write_tables(summary: dict, bases, out: Path) -> list[Path]:
    """perplexity_vs_lambda.csv: one row per λ, a column per (base, method, split)."""
    path = out / "perplexity_vs_lambda.csv"
    columns = [f"{size}_{variant}_{split}" for size in bases for variant in ("knn_lm", "memdec")
               for split in ("domain", "general")]
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["lambda", *columns])
        for lam in summary["lambdas"]:
            writer.writerow([lam, *(summary[c.split("_", 1)[0]][f"{c.split('_', 1)[1]}_ppl_by_lambda"][str(lam)]
                                    for c in columns)])
    return [path]
