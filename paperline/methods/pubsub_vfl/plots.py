"""Figures: test metric against wall time per variant, idle fraction per variant and party, and
the CSVs `dvc plots` reads. Each file is written atomically."""
from __future__ import annotations

import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from paperline.io import atomic_path  # noqa: E402
from paperline.methods.pubsub_vfl.experiment import Experiment  # noqa: E402
from paperline.methods.pubsub_vfl.summary import metric_name, rows  # noqa: E402
from paperline.plots import save_figure  # noqa: E402


def plot_curves(exp: Experiment, task: str, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for i, (variant, runs) in enumerate(exp.runs.items()):
        for j, r in enumerate(runs):
            if r.curve:
                t, m = [p["seconds"] for p in r.curve], [p["metric"] for p in r.curve]
                ax.plot(t, m, "o-", ms=2, color=f"C{i}", alpha=0.7, label=variant if j == 0 else None)
    ax.set(xlabel="wall time since start (s)", ylabel=f"test {metric_name(task)}")
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def plot_idle(table: dict, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(5, 3.2))
    names = list(table)
    x = range(len(names))
    ax.bar([i - 0.2 for i in x], [table[n]["idle_fraction_active"] for n in names], 0.4, label="active")
    ax.bar([i + 0.2 for i in x], [table[n]["idle_fraction_passive"] for n in names], 0.4, label="passive")
    ax.set_xticks(list(x), names, rotation=20, fontsize=8)
    ax.set(ylabel="waiting / wall time (mean over workers)")
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def write_csv(table: dict, path: Path) -> Path:
    columns = ["variant", "idle_fraction", "wall_s", "cpu_utilisation"]
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for variant, row in table.items():
            writer.writerow([variant] + [row[c] for c in columns[1:]])
    return path


def write_all(exp: Experiment, task: str, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    table = {v: row for v, row in rows(exp, task).items() if v in exp.runs}  # the trained variants' timings
    return [plot_curves(exp, task, out_dir / "metric_vs_time.png"), plot_idle(table, out_dir / "idle.png"),
            write_csv(table, out_dir / "idle.csv")]
