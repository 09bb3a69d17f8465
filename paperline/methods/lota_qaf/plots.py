"""Figures of a LoTA-QAF run and the table DVC plots reads; each writes one file atomically."""
from __future__ import annotations

import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from paperline.io import atomic_path  # noqa: E402
from paperline.metrics import MethodMetrics, Scalar  # noqa: E402
from paperline.plots import save_figure  # noqa: E402


def score(value: Scalar) -> float:
    """A cell of a by-bits table: a score (summary.tables')."""
    if not isinstance(value, (int, float)):
        raise TypeError(f"a by-bits table holds scores, not {value!r}")
    return value


def plot_by_bits(metrics: MethodMetrics, table: str, path: Path) -> Path:
    """The task's metric at each bit width: float, quantised, each method unmerged (hatched) and merged."""
    rows = metrics.tables[table]
    columns = [c for c in next(iter(rows.values())) if c != "float"]
    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    width = 0.8 / len(columns)
    for i, column in enumerate(columns):
        xs = [j + i * width for j in range(len(rows))]
        ax.bar(xs, [score(r[column]) for r in rows.values()], width, label=column,
               hatch="//" if column.endswith("_unmerged") else None)
    for j, r in enumerate(rows.values()):
        ax.hlines(score(r["float"]), j - width / 2, j + 0.8 - width / 2, colors="k", linestyles="--")
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(rows))], list(rows))
    ax.set(xlabel="weight bits", ylabel=table.split("_", 1)[1], title=f"{table} (dashed: float)")
    if table.endswith("perplexity"):
        ax.set_yscale("log")
    else:
        lo = min(score(v) for r in rows.values() for v in r.values())
        ax.set_ylim(max(0.0, lo - 0.05), 1.0)
    ax.legend(fontsize=6, ncol=2)
    return save_figure(fig, path)


def plot_losses(metrics: MethodMetrics, task: str, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for variant, losses in metrics.details["histories"].items():
        if variant.startswith(task + "_") and "/seed" not in variant:  # seed 0's curves (the others: MLflow)
            ax.plot(losses, lw=1, label=variant.removeprefix(task + "_"))
    ax.set(xlabel="recovery step", ylabel="training loss", title=f"{task}: recovery from the quantised model")
    ax.legend(fontsize=6, ncol=2)
    return save_figure(fig, path)


def write_table(metrics: MethodMetrics, path: Path) -> Path:
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["table", "bits", "column", "value"])
        for table, rows in metrics.tables.items():
            for bits, row in rows.items():
                for column, value in row.items():
                    writer.writerow([table, bits, column, value])
    return path


def write_all(metrics: MethodMetrics, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [plot_by_bits(metrics, table, out / f"{table}_by_bits.png") for table in metrics.tables]
    paths += [plot_losses(metrics, task, out / f"{task}_losses.png") for task in metrics.details["metric"]]
    return paths + [write_table(metrics, out / "recovery.csv")]
