"""Figures of an HRM-PET run and the tables `dvc plots` reads. Each function writes one file."""
from __future__ import annotations

import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from paperline.io import atomic_path  # noqa: E402
from paperline.methods.hrm_pet.config import VARIANT_SPECS, HrmPetConfig  # noqa: E402
from paperline.methods.hrm_pet.summary import unit_key  # noqa: E402
from paperline.plots import save_figure  # noqa: E402


def curves(cfg: HrmPetConfig, results: dict[str, dict], sequence: str) -> dict[str, np.ndarray]:
    """variant -> accuracy on the seen tasks after each task (mean over seeds)."""
    out: dict[str, np.ndarray] = {}
    for v in cfg.variants:
        learner = VARIANT_SPECS[v][0]
        out[v] = np.mean([[r["accuracy"] for r in results[unit_key(sequence, seed, learner)]["evaluations"][v]]
                          for seed in cfg.run_seeds()], axis=0)
    return out


def plot_accuracy_after_task(cfg: HrmPetConfig, results: dict[str, dict], path: Path) -> Path:
    fig, axes = plt.subplots(1, len(cfg.sequences), figsize=(4.2 * len(cfg.sequences), 3.4), squeeze=False)
    for ax, s in zip(axes[0], cfg.sequences):
        for v, c in curves(cfg, results, s.name).items():
            ax.plot(range(1, len(c) + 1), c, marker="o", lw=2 if v == "hrm_pet" else 1, label=v)
        ax.set(title=s.name, xlabel="tasks learnt", ylabel="accuracy on the seen tasks")
        ax.set_xticks(range(1, s.tasks + 1))
    axes[0][0].legend(fontsize=7)
    return save_figure(fig, path)


def plot_final(rows: dict[str, dict], path: Path) -> Path:
    """A_N and task-matching accuracy per variant."""
    fig, axes = plt.subplots(1, 2, figsize=(8, 3))
    for ax, key in zip(axes, ("final_accuracy", "matching")):
        values = [rows[v][key] for v in rows]
        ax.bar(list(rows), values)
        lo = min(values)
        ax.set(title=key, ylim=(max(0.0, lo - 0.05), min(1.0, max(values) + 0.02)))
        ax.tick_params(axis="x", labelrotation=30, labelsize=7)
    return save_figure(fig, path)


def write_plot_tables(cfg: HrmPetConfig, results: dict[str, dict], rows: dict[str, dict],
                      directory: Path) -> list[Path]:
    """accuracy_after_task.csv (sequence, tasks, one column per variant) and final.csv."""
    directory = Path(directory)
    paths = [directory / "accuracy_after_task.csv", directory / "final.csv"]
    with atomic_path(paths[0]) as tmp, open(tmp, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["sequence", "tasks", *cfg.variants])
        for s in cfg.sequences:
            c = curves(cfg, results, s.name)
            for t in range(s.tasks):
                w.writerow([s.name, t + 1, *(round(float(c[v][t]), 6) for v in cfg.variants)])
    with atomic_path(paths[1]) as tmp, open(tmp, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["variant", "final_accuracy", "matching", "forgetting", "extra_passes"])
        for v, r in rows.items():
            w.writerow([v, r["final_accuracy"], r["matching"], r["forgetting"], r["extra_passes"]])
    return paths


def write_all(cfg: HrmPetConfig, results: dict[str, dict], rows: dict[str, dict], directory: Path) -> list[Path]:
    directory = Path(directory)
    return [plot_accuracy_after_task(cfg, results, directory / "accuracy_after_task.png"),
            plot_final(rows, directory / "final.png")] + write_plot_tables(cfg, results, rows, directory)
