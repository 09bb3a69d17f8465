"""Figures of the SUMO experiments and the CSV tables `dvc plots` reads. Each function writes one
file atomically and returns its path."""
from __future__ import annotations

import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from paperline.io import atomic_path  # noqa: E402
from paperline.methods.sumo.config import SumoConfig  # noqa: E402
from paperline.methods.sumo.optimizers import LABELS  # noqa: E402
from paperline.methods.sumo.summary import lr_table  # noqa: E402
from paperline.plots import save_figure  # noqa: E402


def _write_csv(path: Path, header: list[str], rows: list[list]) -> Path:
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return Path(path)


def _best_curves(runs: list[dict], rows: dict, key: str) -> dict[str, tuple[list[int], np.ndarray]]:
    """{optimizer: (steps, curves seeds×steps)} at the optimizer's best lr."""
    out = {}
    for name, row in rows.items():
        if row.get("best_lr") is None:
            continue
        seeds = [r for r in runs if r["optimizer"] == name and r["lr"] == row["best_lr"]]
        out[name] = (seeds[0]["history"]["step"], np.array([r["history"][key] for r in seeds]))
    return out


def _curve_table(runs: list[dict], rows: dict) -> tuple[list[str], list[list]]:
    """(optimizers, rows of [step, mean training loss over seeds of each]) at each best lr."""
    curves = _best_curves(runs, rows, "train_loss")
    names = list(curves)
    steps = curves[names[0]][0] if names else []
    return names, [[s, *(curves[n][1].mean(0)[i] if i < len(curves[n][0]) else "" for n in names)]
                   for i, s in enumerate(steps)]


def plot_loss_curves(runs: list[dict], rows: dict, path: Path, title: str = "digits MLP",
                     ylabel: str = "training loss (full set)") -> Path:
    """Training loss against step, each optimizer at its best lr: mean over seeds and the min–max band."""
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for name, (steps, curves) in _best_curves(runs, rows, "train_loss").items():
        line, = ax.semilogy(steps, curves.mean(0), label=f"{LABELS[name]} (lr {rows[name]['best_lr']:g})")
        ax.fill_between(steps, curves.min(0), curves.max(0), color=line.get_color(), alpha=0.2)
    ax.set(xlabel="step", ylabel=ylabel, title=f"{title}, best lr per optimizer")
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def plot_lr_sweep(table: dict, path: Path) -> Path:
    """Area under the loss curve (mean training loss over steps) against lr, mean ± std over seeds."""
    fig, ax = plt.subplots(figsize=(5, 3.4))
    for name, by_lr in table.items():
        lrs = [lr for lr, e in by_lr.items() if not e["diverged"]]
        if lrs:
            ax.errorbar(lrs, [by_lr[lr]["mean_train_loss"] for lr in lrs],
                        yerr=[by_lr[lr]["mean_train_loss_std"] for lr in lrs], marker="o", ms=3, capsize=2,
                        label=LABELS[name])
    ax.set(xscale="log", yscale="log", xlabel="learning rate", ylabel="mean training loss over steps")
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def plot_ns_error(theory: dict, path: Path) -> Path:
    """Relative error of Newton–Schulz and of the exact SVD against the true UVᵀ, vs κ (spec §e.1)."""
    fig, ax = plt.subplots(figsize=(5, 3.4))
    kappa = theory["kappa"]
    for key in sorted(k for k in theory if k.endswith("_error_mean") and k.startswith("ns")):
        steps = key[2:].split("_")[0]
        ax.loglog(kappa, theory[key], "o-", label=f"Newton–Schulz, {steps} steps")
    ax.loglog(kappa, np.maximum(theory["svd_error_mean"], 1e-12), "s-", label="exact SVD (fp32)")
    ax.set(xlabel="condition number κ of the moment", ylabel="‖O − UVᵀ‖_F / ‖UVᵀ‖_F",
           title=f"{theory['rank']}×{theory['cols']} moments")
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def plot_cost(rows: dict, path: Path) -> Path:
    """Optimizer-state bytes and step time, each relative to AdamW."""
    names = [n for n, row in rows.items() if "state_bytes_vs_adamw" in row]
    fig, axes = plt.subplots(1, 2, figsize=(7, 3))
    axes[0].bar(range(len(names)), [rows[n]["state_bytes_vs_adamw"] for n in names])
    axes[0].set(ylabel="state bytes / AdamW's")
    if all("step_time_vs_adamw" in rows[n] for n in names):
        axes[1].bar(range(len(names)), [rows[n]["step_time_vs_adamw"] for n in names])
    axes[1].set(ylabel="step time / AdamW's (same run)")
    for ax in axes:
        ax.set_xticks(range(len(names)), [LABELS[n] for n in names], rotation=30, ha="right", fontsize=7)
        ax.axhline(1, c="k", lw=0.6)
    return save_figure(fig, path)


def plot_moment_condition(runs: list[dict], rows: dict, path: Path) -> Path:
    """κ = σ_max/σ_min of the r×l moments SUMO orthogonalises against step, at each SUMO variant's
    best lr: the median over the matrices (solid) and the max (dashed), first seed."""
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for name, row in rows.items():
        run = next((r for r in runs if r["optimizer"] == name and r["lr"] == row.get("best_lr")
                    and r["condition"]["step"]), None)
        if run is None:
            continue
        c = run["condition"]
        line, = ax.semilogy(c["step"], c["median"], label=f"{LABELS[name]} median (lr {row['best_lr']:g})")
        ax.semilogy(c["step"], c["max"], "--", color=line.get_color(), label=f"{LABELS[name]} max")
    ax.set(xlabel="step", ylabel="κ of the low-rank moment", title="causal LM: moment condition numbers")
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def write_text_lm(runs: list[dict], rows: dict, directory: Path) -> list[Path]:
    """The causal-LM task's figures and the CSV of its loss curves (step × optimizer, best lr)."""
    directory = Path(directory)
    names, loss_rows = _curve_table(runs, rows)
    return [plot_loss_curves(runs, rows, directory / "lm_loss_curves.png", title="causal LM (Shakespeare)",
                             ylabel="training loss (minibatch)"),
            # the sweep at seed 0, where every lr ran (the best lr's other seeds would weigh in for it alone)
            plot_lr_sweep(lr_table([r for r in runs if r.get("seed_index", 0) == 0]), directory / "lm_lr_sweep.png"),
            plot_moment_condition(runs, rows, directory / "lm_moment_condition.png"),
            _write_csv(directory / "lm_loss_curves.csv", ["step", *names], loss_rows)]


def write_plot_tables(runs: list[dict], rows: dict, theory: dict, directory: Path) -> list[Path]:
    """loss_curves.csv (step × optimizer, mean over seeds at the best lr) and ns_error.csv (κ ×
    method): the tables `dvc plots show` draws."""
    directory = Path(directory)
    names, loss_rows = _curve_table(runs, rows)
    ns_keys = sorted(k for k in theory if k.startswith("ns") and k.endswith("_error_mean"))
    ns_rows = [[k, theory["svd_error_mean"][i], *(theory[key][i] for key in ns_keys)]
               for i, k in enumerate(theory["kappa"])]
    return [_write_csv(directory / "loss_curves.csv", ["step", *names], loss_rows),
            _write_csv(directory / "ns_error.csv", ["kappa", "svd", *(k.removesuffix("_error_mean") for k in ns_keys)],
                       ns_rows)]


def write_all(cfg: SumoConfig, runs: list[dict], rows: dict, theory: dict, directory: Path,
              lm_runs: list[dict] | None = None, lm_rows: dict | None = None) -> list[Path]:
    """Every figure and table of a run (`rows`: summary.summarize's; `lm_rows`: the causal-LM
    task's, when it ran), into `directory`."""
    directory = Path(directory)
    if cfg.task == "digits_mlp":
        curve_labels = {}
    else:
        assert cfg.lm is not None  # the llama_c4 task's section
        curve_labels = {"title": f"LLaMA-{cfg.lm.model_size} on C4", "ylabel": "training loss (minibatch mean)"}
    paths = [plot_loss_curves(runs, rows, directory / "loss_curves.png", **curve_labels),
             plot_lr_sweep(lr_table(runs), directory / "lr_sweep.png"),
             plot_ns_error(theory, directory / "ns_error_vs_kappa.png"),
             plot_cost(rows, directory / "state_and_step_time.png"),
             *write_plot_tables(runs, rows, theory, directory)]
    if lm_rows:
        assert lm_runs is not None  # given with lm_rows
        paths += write_text_lm(lm_runs, lm_rows, directory)
    return paths
