"""What writing one figure costs, as `paperline/plots.py` `save_figure` does it (`tight_layout`,
then `savefig(..., bbox_inches="tight")`: each a full draw) against cheaper ways to lay it out:

    .venv/bin/python benchmarks/figure_save.py [--repeats 3]

The figure is the kind the methods draw: a 3x3 grid of log-scale loss curves with mathtext labels
and legends (log-scale tick labels are mathtext too, which is where Agg spends its time). Prints
the best of `--repeats` wall times of each way and its ratio to today's, measured in the same run.
Figures are ~15% of a tiny method stage (README, "where one tiny method stage's time goes").
"""
from __future__ import annotations

import argparse
import io
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

WAYS = {  # name: (layout engine at creation, tight_layout() before saving, bbox_inches="tight")
    "today: tight_layout + bbox_inches='tight'": (None, True, True),
    "tight_layout, no bbox_inches": (None, True, False),
    "layout='constrained', no bbox_inches": ("constrained", False, False),
    "no layout, no bbox_inches (one draw)": (None, False, False),
}


def loss_grid(layout: str | None):
    fig, axes = plt.subplots(3, 3, figsize=(12, 10), layout=layout)
    steps = np.arange(200)
    for i, ax in enumerate(axes.flat):
        for k in range(4):
            ax.semilogy(steps, np.exp(-steps / (20 + 10 * k)) + 1e-3, label=f"$c={k}$")
        ax.set_title(rf"$\|W_{i}\|_*$ vs step")
        ax.set_xlabel("step")
        ax.set_ylabel(r"$\mathcal{L}$")
        ax.legend()
    return fig


def seconds(layout: str | None, tight_layout: bool, bbox_tight: bool, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        fig = loss_grid(layout)
        started = time.perf_counter()
        if tight_layout:
            fig.tight_layout()
        fig.savefig(io.BytesIO(), format="png", dpi=110, bbox_inches="tight" if bbox_tight else None)
        best = min(best, time.perf_counter() - started)
        plt.close(fig)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    times = {name: seconds(*way, args.repeats) for name, way in WAYS.items()}
    today = next(iter(times.values()))
    for name, t in times.items():
        print(f"{name:45s} {t:6.2f} s  {t / today:5.2f}x today's")


if __name__ == "__main__":
    main()
