"""Figures of the Influence Distillation run and the CSV tables `dvc plots` reads."""
from __future__ import annotations

import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from paperline.io import atomic_path  # noqa: E402
from paperline.plots import save_figure  # noqa: E402


def write_csv(path: Path, header: list[str], rows: list[list]) -> Path:
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return Path(path)


def plot_target_metrics(rows: dict[str, dict], targets: list[str], path: Path) -> Path:
    """Held-out assistant-token accuracy and loss per target, one bar per selection method."""
    methods = list(rows)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    width = 0.8 / len(methods)
    x = np.arange(len(targets))
    for i, m in enumerate(methods):
        for ax, key in zip(axes, ("token_accuracy", "loss")):
            ax.bar(x + i * width, [rows[m][f"{t}_{key}"] for t in targets], width, label=m)
    for ax, label in zip(axes, ("held-out token accuracy (assistant tokens)", "held-out loss (assistant tokens)")):
        ax.set_xticks(x + width * (len(methods) - 1) / 2, targets)
        ax.set_ylabel(label)
    axes[0].legend(fontsize=8)
    return save_figure(fig, path)


def plot_propagated_vs_exact(exact: np.ndarray, propagated: np.ndarray, spearman: float, path: Path) -> Path:
    """Each pool sample's exact first-order influence against the landmark-propagated one (mean over targets)."""
    fig, ax = plt.subplots(figsize=(4.5, 4))
    ax.scatter(exact, propagated, s=4, alpha=0.5)
    ax.set_xlabel("exact influence (mean over target examples)")
    ax.set_ylabel("propagated influence p̂")
    ax.set_title(f"Spearman ρ = {spearman:.3f}")
    return save_figure(fig, path)


def plot_qp_check(qp: dict, path: Path) -> Path:
    lrs = [r["lr"] for r in qp["rows"]]
    fig, ax = plt.subplots(figsize=(4.5, 3.5))
    ax.loglog(lrs, [max(r["relative_weight_difference"], 1e-12) for r in qp["rows"]], "o-")
    ax.set_xlabel("learning rate η")
    ax.set_ylabel("‖w₂ − w₁‖ / ‖w₁‖ (second vs first order)")
    ax.set_title("logistic regression: QP vs first order")
    return save_figure(fig, path)


def plot_landmark_curve(curve: list[dict], path: Path) -> Path:
    """Spearman of the propagated against the exact influence (non-landmark samples) per landmark count."""
    counts = [r["num_landmarks"] for r in curve]
    fig, ax = plt.subplots(figsize=(4.5, 3.5))
    ax.semilogx(counts, [r["spearman_of_target_mean"] for r in curve], "o-", label="target mean", base=2)
    ax.semilogx(counts, [r["spearman_mean_over_targets"] for r in curve], "s--", label="mean over targets", base=2)
    ax.set_xlabel("landmarks")
    ax.set_ylabel("Spearman ρ, propagated vs exact")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def write_all(metrics, targets: list[str], qp: dict, scores: dict | None, directory: Path) -> list[Path]:
    """Every figure (PNG) and `dvc plots` table (CSV) of a run, into `directory`; `scores`: the
    target-mean exact and propagated influence of the selection stage (scores.npz), when it has them."""
    directory = Path(directory)
    rows = metrics.rows
    paths = [plot_target_metrics(rows, targets, directory / "target_accuracy.png"),
             plot_qp_check(qp, directory / "qp_first_vs_second_order.png"),
             write_csv(directory / "target_metrics.csv", ["method", "target", "loss", "token_accuracy"],
                       [[m, t, r[f"{t}_loss"], r[f"{t}_token_accuracy"]] for m, r in rows.items() for t in targets]),
             write_csv(directory / "qp_check.csv", list(qp["rows"][0]), [list(r.values()) for r in qp["rows"]])]
    curve = list(metrics.tables.get("landmark_curve", {}).values())
    if curve:
        paths += [plot_landmark_curve(curve, directory / "landmark_curve.png"),
                  write_csv(directory / "landmark_curve.csv", list(curve[0]), [list(r.values()) for r in curve])]
    if scores is not None:
        spearman = metrics.headline.get("id_vs_exact_spearman_of_target_mean", float("nan"))
        paths += [plot_propagated_vs_exact(scores["exact"], scores["propagated"], spearman,
                                           directory / "propagated_vs_exact.png"),
                  write_csv(directory / "propagated_vs_exact.csv", ["exact", "propagated"],
                            [[float(a), float(b)] for a, b in zip(scores["exact"], scores["propagated"])])]
    return paths
