"""Figures of the AltLoRA run: ‖sBA − Δ‖_F against step per optimizer (best lr, c = 1), the curves
under the rescalings c, state floats and step time against LoRA-AdamW; CSVs for `dvc plots`."""
from __future__ import annotations

import csv
from pathlib import Path

from paperline.io import atomic_path
from paperline.methods.altlora.config import BASELINE, AltLoRAConfig
from paperline.plots import plt, save_figure


def _best_curves(cfg: AltLoRAConfig, runs: list[dict], rank: int) -> dict[str, dict]:
    curves: dict[str, dict] = {}
    for name in cfg.optimizers:
        mine = [r for r in runs if r["optimizer"] == name and r["rank"] == rank and r["c"] == 1.0 and not r["diverged"]]
        if mine:
            curves[name] = min(mine, key=lambda r: r["final_loss"])["history"]
    return curves


def _write_csv(path: Path, header: list[str], rows: list[list]) -> Path:
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def write_all(cfg: AltLoRAConfig, rows: dict, runs: list[dict], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    rank = cfg.linear.ranks[0]
    runs = [r for r in runs if r.get("seed", 0) == 0]  # the curves of the first seed (its problem, its sweep)
    paths = []
    curves = _best_curves(cfg, runs, rank)
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name, h in curves.items():
        ax.semilogy(h["step"], h["error"], label=name)
    ax.set(xlabel="step", ylabel="‖sBA − Δ‖_F", title=f"linear adaptation, r = {rank}, best lr, c = 1")
    ax.legend(fontsize=8)
    paths.append(save_figure(fig, out_dir / "error_curves.png"))
    steps = next(iter(curves.values()))["step"] if curves else []
    names = list(curves)
    paths.append(_write_csv(out_dir / "error_curves.csv", ["step", *names],
                            [[s, *(curves[n]["error"][i] if i < len(curves[n]["error"]) else "" for n in names)]
                             for i, s in enumerate(steps)]))

    shown = [n for n in ("lora_adamw", "altlora", "scaledgd", "altlora_plus") if n in cfg.optimizers]
    fig, axes = plt.subplots(1, len(shown), figsize=(3.2 * len(shown), 3.2), sharey=True, squeeze=False)
    for ax, name in zip(axes[0], shown):
        best_lr = rows[name].get("best_lr")
        for c in cfg.linear.scales:
            run = next((r for r in runs if r["optimizer"] == name and r["rank"] == rank and r["c"] == c
                        and r["lr"] == best_lr), None)
            if run:
                ax.semilogy(run["history"]["step"], run["history"]["error"], label=f"c = {c:g}")
        ax.set(title=name, xlabel="step")
    axes[0][0].set_ylabel("‖sBA − Δ‖_F")
    axes[0][0].legend(fontsize=8)
    fig.suptitle("initialisation (A·c, B/c) at each optimizer's best lr")
    paths.append(save_figure(fig, out_dir / "rescaling_curves.png"))

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.5))
    names = list(rows)
    ax1.bar(names, [rows[n][f"state_floats_vs_{BASELINE}"] for n in names])
    ax1.set(ylabel=f"state floats / {BASELINE}'s", title="optimizer state (linear, formula = counted)")
    if all("step_ms" in rows[n] for n in names):
        ax2.bar(names, [rows[n][f"step_time_vs_{BASELINE}"] for n in names])
        ax2.set(ylabel=f"step time / {BASELINE}'s", title="step time")
    for ax in (ax1, ax2):
        ax.tick_params(axis="x", rotation=45)
    paths.append(save_figure(fig, out_dir / "state_and_step_time.png"))
    return paths
