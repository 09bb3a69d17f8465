"""metrics/ztsurv.json: c-index per method (mean and spread over folds, pooled out-of-fold), the
comparison the paper claims, segmentation quality where the truth is known, compute ratios."""
from __future__ import annotations

import numpy as np

from paperline.methods.ztsurv.segment import LYMPHOCYTE, STROMA, TUMOUR, dice
from paperline.methods.ztsurv.train import FoldResult, c_index, out_of_fold

POOLING = ("mean_pool", "abmil")


def median_split(risk: np.ndarray) -> np.ndarray:
    """True for the high-risk group (above the median out-of-fold risk)."""
    return risk > np.median(risk)


def logrank_p(time: np.ndarray, event: np.ndarray, high: np.ndarray) -> float | None:
    from sksurv.compare import compare_survival
    from sksurv.util import Surv

    if high.all() or not high.any():
        return None
    return float(compare_survival(Surv.from_arrays(event.astype(bool), time), high.astype(int))[1])


def method_row(results: list[FoldResult], time: np.ndarray, event: np.ndarray) -> dict:
    folds = np.array([r.c_index for r in results])
    risk = out_of_fold(results, len(time))
    return {"c_index_mean": float(folds.mean()), "c_index_std": float(folds.std(ddof=1)) if len(folds) > 1 else 0.0,
            "c_index_min": float(folds.min()), "c_index_max": float(folds.max()),
            "c_index_oof": c_index(event, time, risk), "logrank_p": logrank_p(time, event, median_split(risk))}


def truth_on_thumbnail(truth: np.ndarray, thumb_shape: tuple[int, int], base_size: tuple[int, int],
                       mpp: float, design_um: float) -> np.ndarray:
    """The generator's label map (design grid) sampled at the thumbnail's pixel centres."""
    h, w = thumb_shape
    sx, sy = base_size[0] / w, base_size[1] / h
    rows = np.minimum(((np.arange(h) + 0.5) * sy * mpp / design_um).astype(int), truth.shape[0] - 1)
    cols = np.minimum(((np.arange(w) + 0.5) * sx * mpp / design_um).astype(int), truth.shape[1] - 1)
    return truth[np.ix_(rows, cols)]


def segmentation_scores(pred: dict[str, np.ndarray], truth: dict[str, np.ndarray]) -> dict:
    """Mean Dice per class over slides that have both maps."""
    out = {}
    for name, label in (("tumour", TUMOUR), ("stroma", STROMA), ("lymphocyte", LYMPHOCYTE)):
        scores = [d for pid in pred if pid in truth and (d := dice(pred[pid], truth[pid], label)) is not None]
        out[f"dice_{name}"] = float(np.mean(scores)) if scores else None
    return out


def summarize(rows: dict[str, dict], n_patients: int, n_events: int, failed: list[dict],
              compute: dict | None, segmentation: dict | None, oracle: dict | None,
              til_sources: dict[str, str]) -> dict:
    """The metrics dict. Top-level scalars are the headline; method rows form the table."""
    out: dict = {"patients": n_patients, "events": n_events, "failed_slides": len(failed),
                 "til_maps_real": sum(s == "til-map" for s in til_sources.values()),
                 "til_maps_stand_in": sum(s == "stand-in" for s in til_sources.values())}
    if "ztsurv" in rows:
        z = rows["ztsurv"]["c_index_mean"]
        out["c_index_ztsurv"] = z
        pooling = [rows[m]["c_index_mean"] for m in POOLING if m in rows]
        if pooling:
            out["c_index_best_pooling"] = max(pooling)
            out["gain_over_best_pooling"] = z - max(pooling)
        if "gcn" in rows:
            out["gain_over_type_agnostic_gcn"] = z - rows["gcn"]["c_index_mean"]
        if "composition_cox" in rows:
            out["gain_over_composition_cox"] = z - rows["composition_cox"]["c_index_mean"]
    for key, value in (oracle or {}).items():
        out[key] = value
    for key, value in (segmentation or {}).items():
        out[f"segmentation_{key}"] = value
    for key, value in (compute or {}).items():
        out[f"compute_{key}"] = value
    out.update(rows)
    return out
