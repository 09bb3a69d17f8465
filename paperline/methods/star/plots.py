"""Figures of the STAR run, and the tables `dvc plots` reads: a learning curve per task and budget
(true-reward return, mean ± std over seeds) and the overestimation over training, the two scores
and the overestimation per row."""
from __future__ import annotations

import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from paperline.io import atomic_path  # noqa: E402
from paperline.methods.star.config import StarConfig, row_name, variants_of  # noqa: E402
from paperline.metrics import MethodMetrics  # noqa: E402
from paperline.plots import save_figure  # noqa: E402


def _curve_rows(cfg: StarConfig, task, budget: int) -> dict[str, str]:
    """variant -> its row at this budget (the oracle's has none)."""
    return {v: row_name(task.name, v, budget) for v in variants_of(cfg, task)}


def learning_curves(cfg: StarConfig, metrics: MethodMetrics, out: Path) -> list[Path]:
    curves = metrics.details["curves"]
    paths = []
    for task in cfg.tasks:
        for budget in task.budgets:
            rows = _curve_rows(cfg, task, budget)
            fig, ax = plt.subplots(figsize=(5.5, 3.6))
            for variant, name in rows.items():
                c = curves[name]
                mean, std = c["mean"], c["std"]
                ax.plot(c["step"], mean, label=variant, lw=1.4 if variant == "star" else 1.0)
                ax.fill_between(c["step"], [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)],
                                alpha=0.15)
            ax.set(title=f"{task.env_id}, {budget} labels", xlabel="environment steps", ylabel="true return")
            ax.legend(fontsize=7)
            paths.append(save_figure(fig, out / f"learning_curve_{task.name}_{budget}.png"))
            csv_path = out / f"learning_curve_{task.name}_{budget}.csv"
            with atomic_path(csv_path) as tmp, open(tmp, "w", newline="") as f:
                writer = csv.writer(f)
                writer.writerow(["step", *rows])
                for i, step in enumerate(curves[next(iter(rows.values()))]["step"]):
                    writer.writerow([step, *(curves[n]["mean"][i] if i < len(curves[n]["mean"]) else "" for n in rows.values())])
            paths.append(csv_path)
    return paths


def overestimation_curves(cfg: StarConfig, metrics: MethodMetrics, out: Path) -> list[Path]:
    """Per task and budget: the paper's relative overestimation, (Q̄ − Ḡ)/|Ḡ| with Ḡ the current
    policy's discounted true return, at each evaluation point (mean over seeds)."""
    curves = metrics.details["curves"]
    paths = []
    for task in cfg.tasks:
        for budget in task.budgets:
            rows = _curve_rows(cfg, task, budget)
            if not all("overestimation_rel" in curves[n] for n in rows.values()):
                continue
            fig, ax = plt.subplots(figsize=(5.5, 3.6))
            for variant, name in rows.items():
                values = [float("nan") if v is None else v for v in curves[name]["overestimation_rel"]]
                ax.plot(curves[name]["step"], values, label=variant,
                        lw=1.4 if variant == "star" else 1.0)
            ax.axhline(0, c="grey", lw=0.6)
            ax.axvline(task.feedback_start, c="grey", lw=0.6, ls=":")  # the first labels
            ax.set(title=f"{task.env_id}, {budget} labels", xlabel="environment steps",
                   ylabel="(mean Q − true return) / |true return|")
            ax.legend(fontsize=7)
            paths.append(save_figure(fig, out / f"overestimation_{task.name}_{budget}.png"))
    return paths


def bars(metrics: MethodMetrics, key: str, ylabel: str, path: Path) -> Path:
    names = list(metrics.rows)
    values = [float(v) if isinstance(v, (int, float)) else 0.0 for v in (metrics.rows[n][key] for n in names)]
    errors = [metrics.rows[n].get(f"{key}_std") or 0.0 for n in names]
    fig, ax = plt.subplots(figsize=(max(5, 0.45 * len(names)), 3.6))
    ax.bar(range(len(names)), values, yerr=errors, color=["C3" if "star" == metrics.rows[n]["variant"] else "C0"
                                                          for n in names])
    ax.set_xticks(range(len(names)), names, rotation=70, fontsize=7)
    ax.axhline(0, c="grey", lw=0.6)
    ax.set(ylabel=ylabel)
    return save_figure(fig, path)


def offline_bars(metrics: MethodMetrics, path: Path) -> Path:
    """The offline table: normalised return per extraction (and the dataset's), ± std over seeds."""
    rows = metrics.tables["offline"]
    names = list(rows)
    fig, ax = plt.subplots(figsize=(4.5, 3.4))
    ax.bar(range(len(names)), [rows[n]["normalized_return"] or 0.0 for n in names],
           yerr=[rows[n].get("normalized_return_std") or 0.0 for n in names],
           color=["C3" if n == "offline-star" else "C7" if n == "offline-dataset" else "C0" for n in names])
    ax.set_xticks(range(len(names)), [n.removeprefix("offline-") for n in names])
    ax.axhline(0, c="grey", lw=0.6)
    ax.axhline(1, c="grey", lw=0.6, ls=":")
    ax.set(ylabel="normalised return (expert = 1, random = 0)", title="offline, same reward model")
    return save_figure(fig, path)


def write_all(cfg: StarConfig, metrics: MethodMetrics, out: Path) -> list[Path]:
    out = Path(out)
    extra = [offline_bars(metrics, out / "offline.png")] if "offline" in metrics.tables else []
    return [*extra, *learning_curves(cfg, metrics, out), *overestimation_curves(cfg, metrics, out),
            bars(metrics, "paper_score", "paper's score (success rate, else return / oracle's)",
                 out / "paper_score.png"),
            bars(metrics, "normalized_return", "normalised return (oracle = 1, random = 0)", out / "normalized_return.png"),
            bars(metrics, "overestimation_rel", "(Q − true return) / |true return|, over training",
                 out / "overestimation.png")]
