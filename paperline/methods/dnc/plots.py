"""Figures of the deep-UFM experiment (spec §c plots i–v) and the tables DVC plots read.
Each function writes one file atomically and returns its path."""
from __future__ import annotations

import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from paperline.io import atomic_path  # noqa: E402
from paperline.methods.dnc.ufm import UFMGroupResult  # noqa: E402
from paperline.plots import save_figure  # noqa: E402


def _pairs(summary: dict) -> dict[int, list[tuple[int, dict]]]:
    """{K: [(L, entry), ...] sorted by L} from summary keys "K{K}_L{L}"."""
    out: dict[int, list] = {}
    for key, entry in summary.items():
        K, L = (int(part[1:]) for part in key.split("_"))
        out.setdefault(K, []).append((L, entry))
    return {K: sorted(v, key=lambda t: t[0]) for K, v in sorted(out.items())}


def _normalised(sv: list[float]) -> np.ndarray:
    values = np.asarray(sv, dtype=float)
    return values / values[0] if values[0] > 0 else values


def plot_z_spectra(results: list[UFMGroupResult], K: int, path: Path) -> Path:
    """σ_j(Z)/σ_1(Z) of every seed, one panel per depth L, coloured by width (plot i)."""
    rs = [r for r in results if r.K == K]
    depths = sorted({r.L for r in rs})
    widths = sorted({r.width for r in rs})
    colours = plt.cm.viridis(np.linspace(0, 0.9, len(widths)))
    fig, axes = plt.subplots(1, len(depths), figsize=(3.2 * len(depths), 3), sharey=True, squeeze=False)
    for ax, L in zip(axes[0], depths):
        for r in (r for r in rs if r.L == L):
            colour = colours[widths.index(r.width)]
            for i, s in enumerate(s for s in r.seeds if not s["diverged"]):
                ax.semilogy(np.arange(1, K + 1), np.maximum(_normalised(s["singular_values"]), 1e-16),
                            "o-", ms=2, lw=0.8, alpha=0.6, color=colour, label=f"d={r.width}" if i == 0 else None)
        ax.axvline(K - 1, ls=":", c="grey")
        ax.set(title=f"K={K}, L={L}", xlabel="j", ylim=(1e-16, 2))
    axes[0][0].set_ylabel("σ_j(Z) / σ_1(Z)")
    axes[0][-1].legend(fontsize=7)
    return save_figure(fig, path)


def plot_layer_spectra(results: list[UFMGroupResult], K: int, path: Path) -> Path:
    """Normalised spectra of each W_l and H_l of the best seed, one column per depth (plot i)."""
    rs = [r for r in results if r.K == K]
    depths = sorted({r.L for r in rs})
    fig, axes = plt.subplots(2, len(depths), figsize=(3.2 * len(depths), 5.5), squeeze=False)
    for col, L in enumerate(depths):
        seeds = [s for r in rs if r.L == L for s in r.seeds if not s["diverged"]]
        if not seeds:
            continue
        best = min(seeds, key=lambda s: s["objective"])
        for layer in best["layers"]:
            for row, kind in enumerate(("W", "H")):
                sv = _normalised(layer[kind]["singular_values"])[: 2 * K]
                axes[row][col].semilogy(np.arange(1, len(sv) + 1), np.maximum(sv, 1e-16), "o-", ms=2,
                                        lw=0.8, label=f"l={layer['layer']}")
        for row, kind in enumerate(("W_l", "H_l")):
            axes[row][col].set(title=f"K={K}, L={L}: {kind}", xlabel="j", ylim=(1e-16, 2))
        axes[0][col].legend(fontsize=6)
    return save_figure(fig, path)


def plot_rank_vs_depth(summary: dict, path: Path) -> Path:
    """Numerical rank (ε = 1e-3) of the best seed's Z against depth, with K−1 for reference (plot ii)."""
    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    for K, rows in _pairs(summary).items():
        Ls = [L for L, _ in rows]
        line, = ax.plot(Ls, [e["numerical_rank_best"] for _, e in rows], "o-", label=f"K={K}")
        ax.axhline(K - 1, ls=":", c=line.get_color(), lw=0.8)
    ax.set(xlabel="depth L", ylabel="rank(Z) of best seed", title="dotted: K−1 (DNC)")
    ax.legend()
    return save_figure(fig, path)


def plot_gap_vs_depth(summary: dict, path: Path) -> Path:
    """Best trained objective − f_DNC* (negative: a lower-rank solution beats DNC), and the cosine
    code's f_cos* − f_DNC* dashed (plot iii)."""
    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    for K, rows in _pairs(summary).items():
        Ls = [L for L, _ in rows]
        line, = ax.plot(Ls, [e["best_trained_objective"] - e["dnc_objective"] for _, e in rows], "o-",
                        label=f"K={K} trained")
        ax.plot(Ls, [e["cosine_objective"] - e["dnc_objective"] for _, e in rows], "--",
                c=line.get_color(), lw=0.8, label=f"K={K} cosine code")
    ax.axhline(0, c="k", lw=0.6)
    ax.set(xlabel="depth L", ylabel="objective − f_DNC*")
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def plot_dnc_fraction_vs_width(summary: dict, path: Path) -> Path:
    """Share of seeds ending at DNC against width d, one line per (K, L) (plot iv)."""
    pairs = _pairs(summary)
    fig, axes = plt.subplots(1, len(pairs), figsize=(4 * len(pairs), 3.2), squeeze=False, sharey=True)
    for ax, (K, rows) in zip(axes[0], pairs.items()):
        for L, e in rows:
            by_width = sorted((int(d), f) for d, f in e["dnc_fraction_by_width"].items())
            ax.plot([d for d, _ in by_width], [f for _, f in by_width], "o-", label=f"L={L}")
        ax.set_xscale("log", base=2)
        ax.set(xlabel="width d", title=f"K={K}", ylim=(-0.05, 1.05))
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("fraction of seeds at DNC")
    return save_figure(fig, path)


def plot_nc_by_layer(results: list[UFMGroupResult], K: int, path: Path) -> Path:
    """NC1 (trace form), NC2 and NC3 per layer of the best seed, one line per depth (plot v)."""
    rs = [r for r in results if r.K == K]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
    for L in sorted({r.L for r in rs}):
        seeds = [s for r in rs if r.L == L for s in r.seeds if not s["diverged"]]
        if not seeds:
            continue
        best = min(seeds, key=lambda s: s["objective"])
        layers = [x["layer"] for x in best["layers"]]
        for ax, key in zip(axes, ("nc1_trace", "nc2", "nc3")):
            values = [x[key] if x[key] is not None else np.nan for x in best["layers"]]
            ax.semilogy(layers, np.maximum(values, 1e-16), "o-", label=f"L={L}")
    names = ("NC1 = tr Σ_W / tr Σ_B", "NC2 (ETF; OF after ReLU)",
             "NC3: l<L projector form (1 = aligned),\nl=L classifier form (0 = aligned)")
    for ax, name in zip(axes, names):
        ax.set(xlabel="layer l", title=f"K={K}: {name}")
    axes[0].legend(fontsize=7)
    return save_figure(fig, path)


def write_plot_tables(summary: dict, directory: Path) -> list[Path]:
    """rank_vs_depth.csv and gap_vs_depth.csv: a column `depth` and one column per K ("K4", "K10")
    holding the best seed's numerical rank, or best objective − f_DNC*; gap_vs_depth.csv also has
    "cosine_K4", ... = f_cos* − f_DNC*. Wide format, so a DVC plot takes y: [K4, K10]."""
    pairs = _pairs(summary)
    depths = sorted({L for rows in pairs.values() for L, _ in rows})
    lookup = {(K, L): e for K, rows in pairs.items() for L, e in rows}

    def value(K, L, f):
        e = lookup.get((K, L))
        return "" if e is None or f(e) is None else f(e)

    tables = {
        "rank_vs_depth.csv": {f"K{K}": (lambda e: e["numerical_rank_best"]) for K in pairs},
        "gap_vs_depth.csv": {
            **{f"K{K}": (lambda e: None if e["best_trained_objective"] is None
                         else e["best_trained_objective"] - e["dnc_objective"]) for K in pairs},
            **{f"cosine_K{K}": (lambda e: e["cosine_objective"] - e["dnc_objective"]) for K in pairs},
        },
    }
    paths = []
    for name, columns in tables.items():
        path = Path(directory) / name
        with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["depth", *columns])
            for L in depths:
                writer.writerow([L, *(value(int(col.split("K")[-1]), L, f) for col, f in columns.items())])
        paths.append(path)
    return paths


def write_all(cfg, summary: dict, results: list[UFMGroupResult], directory: Path) -> list[Path]:
    """Every figure and table of a run, into `directory`."""
    directory = Path(directory)
    paths = [plot_rank_vs_depth(summary, directory / "rank_vs_depth.png"),
             plot_gap_vs_depth(summary, directory / "objective_gap_vs_depth.png"),
             plot_dnc_fraction_vs_width(summary, directory / "dnc_fraction_vs_width.png")]
    for K in cfg.classes:
        of_K = [r for r in results if r.K == K]
        paths += [plot_z_spectra(of_K, K, directory / f"z_spectra_K{K}.png"),
                  plot_layer_spectra(of_K, K, directory / f"layer_spectra_K{K}.png"),
                  plot_nc_by_layer(of_K, K, directory / f"nc_by_layer_K{K}.png")]
    return paths + write_plot_tables(summary, directory)
