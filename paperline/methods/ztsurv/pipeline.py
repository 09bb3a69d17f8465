"""Slide -> segmentation -> graph, for one slide and for the prepared cohort (data/wsi/...)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from paperline.methods.ztsurv.config import ZTSurvConfig
from paperline.methods.ztsurv.graph import cell_table, composition, hetero_graph
from paperline.methods.ztsurv.segment import zero_shot_segment


def slide_graph(rgb: np.ndarray, tissue: np.ndarray, til: np.ndarray, cfg: ZTSurvConfig,
                time: float = 0.0, event: bool = False):
    """(label map, cell table, HeteroData) of one 50x thumbnail."""
    labels = zero_shot_segment(rgb, tissue, til, cfg.til_threshold, cfg.kmeans_texture_px)
    table = cell_table(rgb, tissue, labels, cfg.cell_px, cfg.min_tissue_fraction, cfg.min_component_fraction,
                       cfg.kmeans_texture_px)
    return labels, table, hetero_graph(table, time, event)


@dataclass
class CohortGraphs:
    patient_ids: list[str]
    time: np.ndarray
    event: np.ndarray
    graphs: list  # HeteroData per slide
    compositions: np.ndarray  # (n, 3) area fractions T, S, L
    labels: dict[str, np.ndarray]  # label maps (thumbnail grid)
    til_sources: dict[str, str]
    failed: list[dict]  # slides the prep stages could not use


def build_cohort_graphs(data_dir: Path, cfg: ZTSurvConfig, progress: bool = False) -> CohortGraphs:
    """Graphs of every slide that passed wsi-downsample and til-maps (cohort order)."""
    from tqdm import tqdm

    from paperline.data import wsi
    from paperline.data.wsi_prep import COHORT_DIR, THUMB_DIR, TIL_DIR, load_thumbnail, load_til
    from paperline.io import read_json

    data_dir = Path(data_dir)
    rows = wsi.read_cohort_csv(data_dir / COHORT_DIR / "cohort.csv")
    thumbs = read_json(data_dir / THUMB_DIR / "index.json")
    tils = read_json(data_dir / TIL_DIR / "index.json")
    usable = [r for r in rows if r.patient_id in thumbs["slides"] and r.patient_id in tils["slides"]]
    if cfg.max_patients:
        usable = usable[:cfg.max_patients]
    if len(usable) < cfg.folds:
        raise wsi.WSIError(f"{data_dir}: {len(usable)} usable slides, fewer than folds={cfg.folds}")
    out = CohortGraphs([], np.array([r.time for r in usable]), np.array([r.event for r in usable]), [],
                       np.zeros((len(usable), 3)), {}, {}, thumbs["failed"] + tils["failed"])
    for k, row in enumerate(tqdm(usable, desc="graphs", disable=not progress)):
        thumb, tissue = load_thumbnail(data_dir, row.patient_id, thumbs["slides"][row.patient_id])
        til = load_til(data_dir, row.patient_id)
        labels, table, graph = slide_graph(thumb.rgb, tissue, til, cfg, row.time, row.event)
        out.patient_ids.append(row.patient_id)
        out.graphs.append(graph)
        out.compositions[k] = composition(table)
        out.labels[row.patient_id] = labels
        out.til_sources[row.patient_id] = tils["slides"][row.patient_id]["source"]
    return out


def load_cohort_graphs(path: Path, settings: dict) -> CohortGraphs:
    """The cohort graphs of the finished-unit record at `path` for `settings` (`tasks/ztsurv.py:
    build_graphs` writes it, for the same settings, before any task loads it here)."""
    from paperline.train.records import read_unit

    saved = read_unit(path, settings)
    if saved is None:
        raise FileNotFoundError(f"{path}: no cohort graphs saved for these settings")
    return CohortGraphs(**saved)
