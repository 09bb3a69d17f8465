"""Figures and `dvc plots` tables of the TPA comparison (every figure through paperline.plots)."""
from __future__ import annotations

import csv
from pathlib import Path

from paperline.plots import save_figure


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_val_curves(runs: dict[str, dict], path: Path) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, run in runs.items():
        ax.plot(run["eval_history"]["step"], run["eval_history"]["val_loss"], marker="o", label=name)
    ax.set_xlabel("step")
    ax.set_ylabel("validation loss (nats/token)")
    ax.set_title("validation loss, equal budget, ≈ equal attention parameters")
    ax.legend()
    save_figure(fig, path)
    return path


def plot_cache(summary: dict, path: Path) -> Path:
    plt = _plt()
    names = [n for n, r in summary.items() if isinstance(r, dict) and "kv_cache_elements_per_token_per_layer" in r]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    for ax, key, title in zip(axes, ["kv_cache_elements_per_token_per_layer", "kv_cache_small", "kv_cache_medium"],
                              ["this run (measured)", "paper small (Table 1)", "paper medium (Table 1)"]):
        values = [summary[n][key] for n in names]
        ax.bar(names, values)
        ax.set_title(title)
        ax.tick_params(axis="x", rotation=45)
    axes[0].set_ylabel("KV-cache elements / token / layer")
    save_figure(fig, path)
    return path


def plot_decode(times: dict[str, dict[int, dict]], path: Path) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, rows in times.items():
        contexts = sorted(rows)
        ax.plot(contexts, [rows[c]["ms_per_token"] for c in contexts], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("context length (cached tokens)")
    ax.set_ylabel("decode ms / token (batch 1)")
    ax.legend()
    save_figure(fig, path)
    return path


def write_tables(runs: dict[str, dict], times: dict[str, dict[int, dict]], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    curves = out / "val_loss.csv"
    steps = next(iter(runs.values()))["eval_history"]["step"]
    with open(curves, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", *runs])
        for i, step in enumerate(steps):
            w.writerow([step, *(runs[n]["eval_history"]["val_loss"][i] for n in runs)])
    decode = out / "decode_ms_per_token.csv"
    contexts = sorted(next(iter(times.values())))
    with open(decode, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["context", *times])
        for c in contexts:
            w.writerow([c, *(times[n][c]["ms_per_token"] for n in times)])
    return [curves, decode]
