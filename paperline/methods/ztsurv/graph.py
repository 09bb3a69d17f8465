"""The heterogeneous TME graph of one slide (spec §b3).

Nodes: grid cells of each component (spec: "grid cells ... of each component"): the thumbnail is
cut into square cells of `cell_px` pixels; a cell with at least `min_tissue_fraction` tissue
gives one node per label (tumour, stroma, lymphocyte) covering at least `min_component_fraction`
of the cell. Edges join nodes in the same cell and in 8-neighbouring cells, both directions,
typed by the unordered pair of node types (6 relations: T-T, T-S, T-L, S-S, S-L, L-L). Stored as
`torch_geometric.data.HeteroData` with every node type and all 9 ordered edge keys
(src, "adjacent", dst) present, empty where absent, so graphs batch alike.

Node features: visual = colour and texture statistics over the node's own pixels only (our
choice, [I]; the spec allows CNN embeddings or colour-texture statistics). Computing them per
component keeps what a node looks like apart from what it touches: contact lives in the edges.
The semantic feature is the node type, embedded by the model (a learned type embedding).
"""
from __future__ import annotations

from itertools import combinations_with_replacement

import numpy as np
import torch

from paperline.methods.ztsurv.segment import LYMPHOCYTE, STROMA, TUMOUR, TYPE_NAMES, stain_features

VISUAL_FEATURES = ("mean_r", "mean_g", "mean_b", "std_gray", "mean_hema", "mean_eosin", "std_hema",
                   "std_eosin", "hema_texture", "gradient")
RELATIONS = tuple(combinations_with_replacement(range(3), 2))  # (0,0) T-T ... (2,2) L-L
RELATION_NAMES = tuple(f"{TYPE_NAMES[a][0].upper()}-{TYPE_NAMES[b][0].upper()}" for a, b in RELATIONS)
EDGE_KEYS = tuple((TYPE_NAMES[a], "adjacent", TYPE_NAMES[b]) for a in range(3) for b in range(3))


def relation_of(a: int, b: int) -> int:
    """Index of the unordered type pair {a, b} in RELATIONS."""
    return RELATIONS.index((min(a, b), max(a, b)))


def _block_sums(a: np.ndarray, cell: int) -> np.ndarray:
    """Sums of (h, w, C) over cell x cell blocks -> (ceil(h/cell), ceil(w/cell), C); zero padding."""
    h, w, c = a.shape
    gh, gw = -(-h // cell), -(-w // cell)
    padded = np.zeros((gh * cell, gw * cell, c), np.float64)
    padded[:h, :w] = a
    return padded.reshape(gh, cell, gw, cell, c).sum(axis=(1, 3))


def cell_table(rgb: np.ndarray, tissue: np.ndarray, labels: np.ndarray, cell_px: int,
               min_tissue_fraction: float, min_component_fraction: float = 0.2,
               texture_px: int = 3) -> dict[str, np.ndarray]:
    """Per cell and node type: features (gh, gw, 3, F) over that type's pixels in the cell,
    present (gh, gw, 3) whether it is a node, and pixel counts (gh, gw, 3)."""
    from scipy.ndimage import sobel

    stain = stain_features(rgb, texture_px)
    colour = rgb.astype(np.float64) / 255.0
    gray = colour.mean(-1)
    grad = np.hypot(sobel(gray, 0), sobel(gray, 1))
    values = np.concatenate([colour, gray[..., None], stain, grad[..., None]], axis=-1)
    area = cell_px ** 2
    cell_tissue = _block_sums(tissue.astype(np.float64)[..., None], cell_px)[..., 0] / area
    gh, gw = cell_tissue.shape
    feats = np.zeros((gh, gw, 3, len(VISUAL_FEATURES)), np.float32)
    counts = np.zeros((gh, gw, 3), np.int64)
    for t, label in enumerate((TUMOUR, STROMA, LYMPHOCYTE)):
        m = (labels == label).astype(np.float64)[..., None]
        n = _block_sums(m, cell_px)[..., 0]
        counts[..., t] = np.rint(n).astype(np.int64)
        mean = _block_sums(values * m, cell_px) / np.maximum(n, 1)[..., None]
        sq = _block_sums(values[..., 3:6] ** 2 * m, cell_px) / np.maximum(n, 1)[..., None]
        std = np.sqrt(np.maximum(sq - mean[..., 3:6] ** 2, 0))  # gray, hematoxylin, eosin
        feats[..., t, :] = np.stack([mean[..., 0], mean[..., 1], mean[..., 2], std[..., 0], mean[..., 4],
                                     mean[..., 5], std[..., 1], std[..., 2], mean[..., 6], mean[..., 7]], axis=-1)
    present = (cell_tissue >= min_tissue_fraction)[..., None] & (counts >= max(1.0, min_component_fraction * area))
    feats[~present] = 0
    return {"features": feats, "present": present, "counts": counts}


def hetero_graph(table: dict[str, np.ndarray], time: float = 0.0, event: bool = False):
    """HeteroData from a cell table (see module doc); global attributes time, event (shape (1,))."""
    from torch_geometric.data import HeteroData

    present = table["present"]
    gh, gw, _ = present.shape
    node_ids = np.full(present.shape, -1, np.int64)  # index of each (cell, type) within its type
    data = HeteroData()
    for t, name in enumerate(TYPE_NAMES):
        cells = np.argwhere(present[..., t])
        node_ids[cells[:, 0], cells[:, 1], t] = np.arange(len(cells))
        data[name].x = torch.from_numpy(table["features"][cells[:, 0], cells[:, 1], t].reshape(-1, len(VISUAL_FEATURES)))
        data[name].pos = torch.from_numpy(cells.astype(np.float32).reshape(-1, 2))  # (row, col)
    edges: dict[tuple[str, str, str], tuple[list[int], list[int]]] = {key: ([], []) for key in EDGE_KEYS}
    for i, j, t in np.argwhere(present):
        for di in (-1, 0, 1):
            for dj in (-1, 0, 1):
                y, x = i + di, j + dj
                if not (0 <= y < gh and 0 <= x < gw):
                    continue
                for u in np.nonzero(present[y, x])[0]:
                    if di == 0 and dj == 0 and u == t:
                        continue  # no self-loop
                    key = (TYPE_NAMES[t], "adjacent", TYPE_NAMES[u])
                    edges[key][0].append(node_ids[i, j, t])
                    edges[key][1].append(node_ids[y, x, u])
    for key, (src, dst) in edges.items():
        data[key].edge_index = torch.tensor([src, dst], dtype=torch.long).reshape(2, -1)
    data.time = torch.tensor([float(time)])
    data.event = torch.tensor([bool(event)])
    return data


def relation_ids(edge_types: list[tuple[str, str, str]]) -> torch.Tensor:
    """For `HeteroData.to_homogeneous()`'s edge_type order: the unordered relation of each key."""
    return torch.tensor([relation_of(TYPE_NAMES.index(s), TYPE_NAMES.index(d)) for s, _, d in edge_types])


def composition(table: dict[str, np.ndarray]) -> np.ndarray:
    """Slide-level area fractions (tumour, stroma, lymphocyte) of the segmented tissue pixels."""
    counts = table["counts"].reshape(-1, 3).sum(0).astype(np.float64)
    return counts / max(1.0, counts.sum())
