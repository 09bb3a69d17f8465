"""Figures: global test loss per round per method, client compute per method, and the CSV `dvc
plots` reads. Each file is written atomically."""
from __future__ import annotations

import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from paperline.io import atomic_path  # noqa: E402
from paperline.methods.leff.config import LEFFConfig  # noqa: E402
from paperline.methods.leff.fed import MethodRun  # noqa: E402
from paperline.methods.leff.summary import Runs, row, row_name  # noqa: E402
from paperline.plots import save_figure  # noqa: E402


def plot_loss(cfg: LEFFConfig, runs: Runs, path: Path) -> Path:
    """Each method's loss per round, one line per seed (labelled once)."""
    fig, axes = plt.subplots(1, len(cfg.alphas), figsize=(5 * len(cfg.alphas), 3.5), squeeze=False)
    for ax, alpha in zip(axes[0], cfg.alphas):
        for i, method in enumerate(cfg.methods):
            seeds = [s for s in cfg.run_seeds() if (method, alpha, s) in runs]  # none: not planned at this α
            for k, seed in enumerate(seeds):
                run: MethodRun = runs[(method, alpha, seed)]
                points = [run.initial] + run.rounds
                ax.plot([p["round"] for p in points], [p["test_loss"] for p in points], "o-", ms=3, lw=1,
                        color=f"C{i}", alpha=0.8, label=method if k == 0 else None)
        ax.set(xlabel="round", ylabel="test classification loss (nats)", title=f"Dirichlet α = {alpha:g}")
        ax.legend(fontsize=7)
    return save_figure(fig, path)


def plot_compute(cfg: LEFFConfig, runs: Runs, path: Path) -> Path:
    """At the first α, the first seed's runs (the FLOPs differ between seeds only by the blocks drawn)."""
    alpha, seed = cfg.alphas[0], cfg.run_seeds()[0]
    rows = [row(runs[(m, alpha, seed)]) for m in cfg.methods]
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    x = range(len(cfg.methods))
    ax.bar([i - 0.2 for i in x], [r["client_gflops"] for r in rows], 0.4, label="mean client")
    ax.bar([i + 0.2 for i in x], [r["max_client_gflops"] for r in rows], 0.4, label="straggler")
    ax.set_xticks(list(x), cfg.methods, rotation=20, fontsize=8)
    ax.set(ylabel="GFLOPs per client per round")
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def write_csv(cfg: LEFFConfig, runs: Runs, path: Path) -> Path:
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["method", "seed", "round", "test_loss", "test_accuracy", "straggler_s"])
        for (method, alpha, seed), run in runs.items():
            for r in run.rounds:
                writer.writerow([row_name(method, alpha, cfg.alphas), seed, r["round"], r["test_loss"],
                                 r["test_accuracy"], r["straggler_s"]])
    return path


def write_all(cfg: LEFFConfig, runs: Runs, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    return [plot_loss(cfg, runs, out_dir / "test_loss.png"), plot_compute(cfg, runs, out_dir / "client_compute.png"),
            write_csv(cfg, runs, out_dir / "test_loss.csv")]
