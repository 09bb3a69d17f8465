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


def plot_cache(metrics, path: Path) -> Path:
    """Cache elements per token per layer: measured in this run, and Table 1's at the paper's shapes."""
    plt = _plt()
    names = list(metrics.rows)
    columns = [[metrics.rows[n]["kv_cache_elements_per_token_per_layer"] for n in names]]
    columns += [[metrics.tables["paper_shapes"][n][f"kv_cache_{size}"] for n in names] for size in ("small", "medium")]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    for ax, values, title in zip(axes, columns,
                                 ["this run (measured)", "paper small (Table 1)", "paper medium (Table 1)"]):
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


def write_all(metrics, runs: dict[str, dict], times: dict[str, dict[int, dict]], directory: Path) -> list[Path]:
    """Every figure (PNG) and `dvc plots` table (CSV) of a run, into `directory`."""
    directory = Path(directory)
    return [plot_val_curves(runs, directory / "val_loss.png"), plot_cache(metrics, directory / "kv_cache.png"),
            plot_decode(times, directory / "decode_time.png")] + write_tables(runs, times, directory)
