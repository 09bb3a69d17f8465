"""Figures of the step-size sweep and the tables DVC plots read. Each function writes one file
atomically and returns its path."""
from __future__ import annotations

import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from paperline.io import atomic_path  # noqa: E402
from paperline.methods.ngn_m.optimizers import NGN_FAMILY, TITLES  # noqa: E402
from paperline.methods.ngn_m.problems import PRIMARY_METRIC  # noqa: E402
from paperline.methods.ngn_m.summary import sweep_table  # noqa: E402
from paperline.methods.ngn_m.sweep import VariantResult  # noqa: E402
from paperline.plots import save_figure  # noqa: E402

COLOURS = {"sgd": "tab:gray", "sgdm": "tab:blue", "adam": "tab:orange", "ngn": "tab:olive",
           "ngn_m": "tab:red", "ngn_md": "tab:purple"}
LOSS_LABEL = {"least_squares": "final train loss", "rosenbrock": "final expected loss E f",
              "digits": "final train loss", "cifar": "train loss (10k train images)", "text_lm": "final val loss"}


def _problems(variants: list[VariantResult]) -> list[str]:
    return list(dict.fromkeys(v.problem for v in variants))


def plot_sweep(variants: list[VariantResult], path: Path) -> Path:
    """Final loss (and test accuracy for classifiers) against c, one line per optimizer: seed
    mean with the min–max band; × on the top edge where a seed diverged."""
    kinds = {v.problem: v.kind for v in variants}
    panels = [(p, "loss") for p in _problems(variants)]
    panels += [(p, "accuracy") for p in _problems(variants) if PRIMARY_METRIC[kinds[p]][0] == "accuracy"]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.8 * len(panels), 3.4), squeeze=False)
    for ax, (problem, metric) in zip(axes[0], panels):
        for v in (v for v in variants if v.problem == problem):
            values, c = v.finals(metric), np.asarray(v.c_values)
            colour = COLOURS.get(v.optimizer)
            with np.errstate(all="ignore"):
                mean = values.mean(1)
            ax.plot(c, mean, "o-", ms=3, lw=1.2, color=colour, label=TITLES.get(v.optimizer, v.optimizer))
            ok = np.isfinite(values).all(1)
            if ok.any():
                ax.fill_between(c[ok], values[ok].min(1), values[ok].max(1), color=colour, alpha=0.15, lw=0)
            diverged = v.diverged() > 0
            if diverged.any():
                ax.plot(c[diverged], np.ones(diverged.sum()), "x", color=colour, ms=5,
                        transform=ax.get_xaxis_transform(), clip_on=False)
        ax.set_xscale("log")
        if metric == "loss":
            ax.set_yscale("log")
        ax.set(xlabel="step size c (lr for SGD/SGDM/Adam)",
               ylabel=LOSS_LABEL.get(kinds[problem], "loss") if metric == "loss" else "test accuracy",
               title=problem)
    axes[0][0].legend(fontsize=7)
    return save_figure(fig, path)


def trace_c_values(c_values: list[float], count: int = 4) -> list[float]:
    """Up to `count` grid values spread over the grid, for the γ_k trace."""
    idx = np.unique(np.linspace(0, len(c_values) - 1, min(count, len(c_values))).round().astype(int))
    return [c_values[i] for i in idx]


def plot_gamma_trace(variants: list[VariantResult], path: Path) -> Path | None:
    """γ_k of the first seed against the step, for the NGN family, at a few c (dotted: c itself,
    the ceiling γ_k reaches as ‖g‖ → 0). γ_k ≪ c early is the automatic warm-up of the paper."""
    ngn = [v for v in variants if v.optimizer in NGN_FAMILY]
    if not ngn:
        return None
    problems = _problems(ngn)
    optimizers = [o for o in NGN_FAMILY if any(v.optimizer == o for v in ngn)]
    fig, axes = plt.subplots(len(problems), len(optimizers), figsize=(3.8 * len(optimizers), 2.9 * len(problems)),
                             squeeze=False)
    for r, problem in enumerate(problems):
        for col, opt in enumerate(optimizers):
            ax = axes[r][col]
            found = [v for v in ngn if v.problem == problem and v.optimizer == opt]
            if not found:
                ax.axis("off")
                continue
            runs = {run.c: run for run in found[0].first_seed_runs()}
            chosen = trace_c_values(found[0].c_values)
            colours = plt.cm.viridis(np.linspace(0, 0.9, len(chosen)))
            for c, colour in zip(chosen, colours):
                run = runs.get(c)
                if run is None or not run.gamma:
                    continue
                ax.plot(run.trace_steps[:len(run.gamma)], run.gamma, lw=0.8, color=colour, label=f"c={c:.0e}")
                ax.axhline(c, ls=":", lw=0.8, color=colour)
            ax.set_yscale("log")
            ax.set(title=f"{problem}: {TITLES[opt]}", xlabel="step k", ylabel="γ_k")
            ax.legend(fontsize=6)
    return save_figure(fig, path)


def write_tables(variants: list[VariantResult], directory: Path) -> list[Path]:
    """sweep_<problem>.csv (c against each optimizer's seed-mean final metrics) and
    gamma_<problem>.csv (step, then γ_k of the first seed per NGN-family optimizer and traced c)."""
    paths = []
    for problem in _problems(variants):
        header, rows = sweep_table(variants, problem)
        paths.append(_write_csv(Path(directory) / f"sweep_{problem}.csv", header, rows))
        traces = {}
        for v in variants:
            if v.problem != problem or v.optimizer not in NGN_FAMILY:
                continue
            runs = {run.c: run for run in v.first_seed_runs()}
            for c in trace_c_values(v.c_values):
                if c in runs and runs[c].gamma:
                    traces[f"{v.optimizer}_c{c:.0e}"] = dict(zip(runs[c].trace_steps, runs[c].gamma))
        if traces:
            steps = sorted({s for t in traces.values() for s in t})
            rows = [[s, *(t.get(s, "") for t in traces.values())] for s in steps]
            paths.append(_write_csv(Path(directory) / f"gamma_{problem}.csv", ["step", *traces], rows))
    return paths


def _write_csv(path: Path, header: list[str], rows: list[list]) -> Path:
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows([["" if x is None else x for x in row] for row in rows])
    return path


def write_all(variants: list[VariantResult], directory: Path) -> list[Path]:
    """Every figure and table of a run, into `directory`."""
    directory = Path(directory)
    gamma = plot_gamma_trace(variants, directory / "gamma_trace.png")
    return [plot_sweep(variants, directory / "final_vs_c.png"), *([gamma] if gamma else []),
            *write_tables(variants, directory)]
