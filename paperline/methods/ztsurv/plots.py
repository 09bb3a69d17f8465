"""Figures of the ZTSurv run: segmentation overlays, the graph of one slide, Kaplan-Meier curves of
predicted risk groups, c-index by method; and the CSV `dvc plots` reads. Each writes one file
atomically and returns its path."""
from __future__ import annotations

import csv
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from paperline.io import atomic_path, read_json
from paperline.methods.ztsurv.config import ZTSurvConfig
from paperline.methods.ztsurv.graph import EDGE_KEYS, RELATION_NAMES, RELATIONS
from paperline.methods.ztsurv.pipeline import CohortGraphs
from paperline.methods.ztsurv.segment import TYPE_NAMES
from paperline.methods.ztsurv.summary import median_split
from paperline.methods.ztsurv.train import FoldResult, out_of_fold
from paperline.plots import save_figure

LABEL_COLOURS = np.array([[0, 0, 0], [230, 60, 60], [80, 170, 80], [40, 90, 230]], np.float32) / 255
TYPE_COLOURS = LABEL_COLOURS[1:]


def overlay(rgb: np.ndarray, labels: np.ndarray, alpha: float = 0.45) -> np.ndarray:
    img = rgb.astype(np.float32) / 255
    colour = LABEL_COLOURS[labels]
    a = (labels > 0)[..., None] * alpha
    return img * (1 - a) + colour * a


def plot_overlays(items: list[dict], path: Path) -> Path:
    """Rows: slides; columns: thumbnail, zero-shot labels over it, generator truth (if known)."""
    cols = 3 if any(it.get("truth") is not None for it in items) else 2
    fig, axes = plt.subplots(len(items), cols, figsize=(2.6 * cols, 2.6 * len(items)), squeeze=False)
    for row, it in zip(axes, items):
        row[0].imshow(it["rgb"])
        row[0].set_title(f"{it['patient_id']} ({it.get('note', '')})", fontsize=8)
        row[1].imshow(overlay(it["rgb"], it["labels"]))
        row[1].set_title("zero-shot: T red, S green, L blue", fontsize=8)
        if cols == 3 and it.get("truth") is not None:
            row[2].imshow(overlay(it["rgb"], it["truth"]))
            row[2].set_title("generator truth", fontsize=8)
        for ax in row:
            ax.axis("off")
    return save_figure(fig, path)


def plot_graph(rgb: np.ndarray, graph, cell_px: int, path: Path, title: str = "") -> Path:
    """Nodes at cell centres (a cell's nodes shifted apart) coloured by type; edges coloured by
    their unordered type pair."""
    fig, ax = plt.subplots(figsize=(5.5, 5.5))
    ax.imshow(rgb, alpha=0.55)
    offset = {name: (t - 1) * 0.22 * cell_px for t, name in enumerate(TYPE_NAMES)}  # a cell's nodes side by side

    def centre(name: str, pos):
        return ((pos[:, 1].numpy() + 0.5) * cell_px - 0.5 + offset[name],
                (pos[:, 0].numpy() + 0.5) * cell_px - 0.5 + offset[name])

    rel_colours = plt.cm.tab10(np.arange(len(RELATIONS)))
    for src, _, dst in EDGE_KEYS:
        ei = graph[(src, "adjacent", dst)].edge_index
        if ei.shape[1] == 0 or TYPE_NAMES.index(src) > TYPE_NAMES.index(dst):
            continue  # draw each unordered pair once
        sx, sy = centre(src, graph[src].pos[ei[0]])
        dx, dy = centre(dst, graph[dst].pos[ei[1]])
        r = RELATIONS.index((TYPE_NAMES.index(src), TYPE_NAMES.index(dst)))
        for k in range(len(sx)):
            ax.plot([sx[k], dx[k]], [sy[k], dy[k]], color=rel_colours[r], lw=0.7, alpha=0.8,
                    label=RELATION_NAMES[r] if k == 0 else None)
    for t, name in enumerate(TYPE_NAMES):
        x, y = centre(name, graph[name].pos)
        ax.scatter(x, y, s=14, color=TYPE_COLOURS[t], edgecolor="k", linewidth=0.3, zorder=3, label=name)
    ax.legend(fontsize=6, loc="upper right", ncol=2)
    ax.set_title(title, fontsize=9)
    ax.axis("off")
    return save_figure(fig, path)


def plot_km(groups: dict[str, dict], time: np.ndarray, event: np.ndarray, path: Path) -> Path:
    """Kaplan-Meier (sksurv.nonparametric.kaplan_meier_estimator) of the median split of each
    method's out-of-fold risk; one panel per method."""
    from sksurv.nonparametric import kaplan_meier_estimator

    fig, axes = plt.subplots(1, len(groups), figsize=(3.2 * len(groups), 3), squeeze=False, sharey=True)
    for ax, (method, g) in zip(axes[0], groups.items()):
        for high, colour, name in ((False, "tab:blue", "low risk"), (True, "tab:red", "high risk")):
            m = g["high"] == high
            if m.sum() < 2:
                continue
            t, s = kaplan_meier_estimator(event[m].astype(bool), time[m])
            ax.step(t, s, where="post", color=colour, label=f"{name} (n={m.sum()})")
        p = g.get("logrank_p")
        ax.set(title=f"{method}\nlog-rank p={p:.2g}" if p is not None else method, xlabel="days")
        ax.title.set_fontsize(8)
        ax.legend(fontsize=6)
    axes[0][0].set_ylabel("survival")
    return save_figure(fig, path)


def plot_c_index(rows: dict[str, dict], folds: dict[str, list[float]], path: Path) -> Path:
    methods = list(rows)
    fig, ax = plt.subplots(figsize=(1.2 * len(methods) + 1.5, 3))
    means = [rows[m]["c_index_mean"] for m in methods]
    stds = [rows[m]["c_index_std"] for m in methods]
    ax.bar(range(len(methods)), means, yerr=stds, color="lightsteelblue", capsize=3)
    for i, m in enumerate(methods):
        ax.scatter(np.full(len(folds[m]), i), folds[m], s=8, color="k", zorder=3)
    ax.axhline(0.5, ls=":", c="grey")
    ax.set_xticks(range(len(methods)), methods, rotation=20, fontsize=8)
    ax.set(ylabel="c-index (test folds)", ylim=(0.3, 1.0))
    return save_figure(fig, path)


def write_c_index_csv(rows: dict[str, dict], path: Path) -> Path:
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["method", "c_index_mean", "c_index_std", "c_index_oof"])
        for m, r in rows.items():
            w.writerow([m, r["c_index_mean"], r["c_index_std"], r["c_index_oof"]])
    return Path(path)


def write_all(cfg: ZTSurvConfig, cohort: CohortGraphs, results: dict[str, dict[int, list[FoldResult]]],
              rows: dict[str, dict], per_seed: dict[int, dict[str, dict]], facts: dict, truth: dict, data_dir: Path,
              directory: Path) -> list[Path]:
    """Every figure and table of a run, into `directory`: overlays of the slides at both ends of the
    generator's risk ranking (the first slides without generator facts), the first one's graph,
    Kaplan-Meier curves of each method's out-of-fold risk groups at the first seed, c-index by
    method (the rows' means over seeds, every seed's test folds as dots)."""
    from paperline.data.wsi_prep import THUMB_DIR, load_thumbnail
    directory, n = Path(directory), len(cohort.time)
    thumbs = read_json(Path(data_dir) / THUMB_DIR / "index.json")["slides"]
    order = np.argsort([facts[p]["risk_rank"] for p in cohort.patient_ids]) if facts else np.arange(n)
    picks = list(dict.fromkeys([*order[:(cfg.overlay_slides + 1) // 2], *order[::-1][:cfg.overlay_slides // 2]]))
    items = []
    for i in picks:
        pid = cohort.patient_ids[i]
        thumb, _ = load_thumbnail(data_dir, pid, thumbs[pid])
        note = f"risk rank {facts[pid]['risk_rank']:.2f}, T-L contact {facts[pid]['tl_contact']:.2f}" if facts else ""
        items.append({"patient_id": pid, "rgb": thumb.rgb, "labels": cohort.labels[pid], "truth": truth.get(pid),
                      "note": note})
    first = min(per_seed)
    groups = {m: {"high": median_split(out_of_fold(r[first], n)), "logrank_p": per_seed[first][m]["logrank_p"]}
              for m, r in results.items() if first in r}
    return [plot_overlays(items, directory / "segmentation_overlays.png"),
            plot_graph(items[0]["rgb"], cohort.graphs[picks[0]], cfg.cell_px, directory / "graph_one_slide.png",
                       title=f"graph of {cohort.patient_ids[picks[0]]}"),
            plot_km(groups, cohort.time, cohort.event, directory / "km_risk_groups.png"),
            plot_c_index(rows, {m: [f.c_index for folds in r.values() for f in folds] for m, r in results.items()},
                         directory / "c_index_by_method.png"),
            write_c_index_csv(rows, directory / "c_index.csv")]
