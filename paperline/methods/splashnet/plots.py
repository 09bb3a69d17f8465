"""Figures of the SplashNet pipeline (every one through paperline.plots.save_figure) and the CSV
tables `dvc plots` draws."""
from __future__ import annotations

import csv
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from paperline.io import atomic_path
from paperline.methods.splashnet.transforms import BAND_BINS
from paperline.plots import plt, save_figure

BAND_EDGES_HZ = [(lo * 31.25, hi * 31.25 if hi < 33 else 1000.0) for lo, hi in BAND_BINS]


def plot_session_qa(raw, path: Path, seconds: float = 4.0) -> Path:
    """Traces of the first seconds of an mne RawArray (left hand) with its keystroke annotations."""
    sfreq = raw.info["sfreq"]
    start = float(raw.annotations.onset[0]) - 0.5 if len(raw.annotations) else 0.0
    start = max(0.0, start)
    a, b = int(start * sfreq), int(min(raw.n_times, (start + seconds) * sfreq))
    data = raw.get_data(start=a, stop=b)
    t = np.arange(a, b) / sfreq
    fig, ax = plt.subplots(figsize=(10, 6))
    scale = 4 * np.median(data.std(axis=1)) + 1e-12
    for i in range(32):
        ax.plot(t, data[i] / scale - 1.2 * i, lw=0.4, color="C0" if i < 16 else "C1")
    for onset, desc in zip(raw.annotations.onset, raw.annotations.description):
        if start <= onset < start + seconds:
            ax.axvline(onset, color="k", lw=0.5, alpha=0.4)
            ax.text(onset, 1.5, desc.replace("Key.space", "␣"), fontsize=7, ha="center")
    ax.set_yticks([-1.2 * i for i in range(0, 32, 4)], [raw.ch_names[i] for i in range(0, 32, 4)])
    ax.set_xlabel("time (s)")
    ax.set_title("generated session: 32 EMG channels (blue left, orange right) and keystroke annotations")
    return save_figure(fig, path)


def plot_band_powers(freqs: np.ndarray, psd: np.ndarray, fractions: list[float], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.semilogy(freqs[1:], psd.mean(0)[1:], color="k")
    for (lo, hi), frac in zip(BAND_EDGES_HZ, fractions):
        ax.axvspan(lo, hi, alpha=0.12)
        ax.text((lo + hi) / 2, psd.mean(0)[1:].max(), f"{100 * frac:.0f}%", ha="center", fontsize=8)
    ax.set_xlabel("frequency (Hz)")
    ax.set_ylabel("Welch PSD (mne), channel mean")
    ax.set_title("band powers behind the 6-band choice (share of power per band)")
    return save_figure(fig, path)


def plot_channel_stats(stats: dict[str, Any], path: Path) -> Path:
    """Per-user channel means of the 6-band features, raw and after rolling time normalization."""
    users = list(stats["users"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharex=True)
    for ax, kind, title in ((axes[0], "raw", "raw log-band features"), (axes[1], "rtn", "after RTN")):
        for u in users:
            ax.plot(np.asarray(stats["users"][u][f"{kind}_mean"]).ravel(), marker=".", lw=0.8, label=u)
        spread = stats["summary"][f"{kind}_cross_user_std_of_channel_means"]
        ax.set_title(f"{title}: cross-user std of channel means {spread:.3f}")
        ax.set_xlabel("channel (left 0–15, right 16–31)")
    axes[0].set_ylabel("mean over time and bands")
    axes[1].legend(fontsize=7, ncol=2)
    return save_figure(fig, path)


def plot_cer(rows: dict[str, dict[str, Any]], per_seed: dict[str, dict[str, dict]], path: Path) -> Path:
    """Each variant's CER, the mean over seeds as a bar with every seed's value as a point on it."""
    variants = list(rows)
    x = np.arange(len(variants))
    fig, ax = plt.subplots(figsize=(8, 4))
    bars = [(f"{stage}{decoder}", f"{label}{', beam + char LM' if decoder else ', greedy'}")
            for decoder in ("", "_beam") for stage, label in (("zero_shot", "zero-shot (held-out users)"),
                                                              ("finetuned", "after per-user fine-tuning"))
            if f"{stage}{decoder}_cer" in rows[variants[0]]]
    width = 0.8 / len(bars)
    for i, (key, label) in enumerate(bars):
        at = x - 0.4 + width * (i + 0.5)
        ax.bar(at, [rows[v][f"{key}_cer"] for v in variants], width, label=f"{label}, mean", alpha=0.6)
        for j, v in enumerate(variants):
            seeds = list(per_seed[v].values())
            ax.scatter([at[j]] * len(seeds), [r[f"{key}_cer"] for r in seeds], s=12, color="k", zorder=3,
                       label="one seed" if i == j == 0 else None)
    ax.set_xticks(x, variants, rotation=20)
    ax.set_ylabel("CER (%)")
    ax.legend(fontsize=7)
    seed_names = sorted({s for v in per_seed.values() for s in v}, key=lambda s: (len(s), s))
    ax.set_title(f"CER per variant: mean over seeds {', '.join(seed_names)} (bars), each seed (points)")
    return save_figure(fig, path)


def plot_loss_curves(histories: dict[str, list[list]], path: Path) -> Path:
    """Training CTC loss per variant, one line per seed in the variant's colour."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, (name, seeds) in enumerate(histories.items()):
        for k, history in enumerate(seeds):
            if history:
                steps, losses = zip(*history)
                ax.plot(steps, losses, lw=0.8, color=f"C{i % 10}", alpha=0.8, label=name if k == 0 else None)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("CTC loss (training windows)")
    ax.set_yscale("log")
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def write_csv(path: Path, header: list[str], rows: list[list]) -> Path:
    with atomic_path(path) as tmp:
        with open(tmp, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(header)
            w.writerows(rows)
    return path


CER_COLUMNS = ["zero_shot_cer", "finetuned_cer", "zero_shot_beam_cer", "finetuned_beam_cer", "zero_shot_ctc_loss",
               "finetuned_ctc_loss"]


def write_all(rows: dict[str, dict[str, Any]], per_seed: dict[str, dict[str, dict]], histories: dict[str, list[list]],
              features: Path, directory: Path) -> list[Path]:
    """Every figure and table of a run, into `directory` (`rows`, `per_seed`: summary.variant_rows';
    `histories`: variant -> each seed's loss curve): CER per variant with its seeds, the training
    curves, cer.csv (means and spreads) and cer_per_seed.csv for `dvc plots`, and the data stages'
    figures beside them."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = [plot_cer(rows, per_seed, directory / "cer_per_variant.png"),
             plot_loss_curves(histories, directory / "loss_curves.png")]
    for qa in (features / "qa" / "channel_stats.png", features.parent / "sessions" / "qa" / "session_traces.png",
               features.parent / "sessions" / "qa" / "band_powers.png"):
        if qa.is_file():  # the data stages' figures, shown beside the method's
            shutil.copy(qa, directory / qa.name)
            paths.append(directory / qa.name)
    columns = [c for c in CER_COLUMNS if c in next(iter(rows.values()))]
    spreads = [f"{c}_std" for c in columns if f"{c}_std" in next(iter(rows.values()))]
    paths.append(write_csv(directory / "cer.csv", ["variant", *columns, *spreads],
                           [[v, *(row[c] for c in [*columns, *spreads])] for v, row in rows.items()]))
    paths.append(write_csv(directory / "cer_per_seed.csv", ["variant", "seed", *columns],
                           [[v, seed, *(row[c] for c in columns)] for v, seeds in per_seed.items()
                            for seed, row in seeds.items()]))
    return paths
