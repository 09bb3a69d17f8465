"""metrics/ztsurv.json (`method_metrics`): c-index per method (per seed: mean and spread over its
folds, pooled out-of-fold; the row: the mean over seeds), the paper's claims (claims.py) from the
per-seed rows, segmentation quality where the truth is known, compute ratios."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from paperline.io import read_json
from paperline.methods.ztsurv import claims
from paperline.methods.ztsurv.pipeline import CohortGraphs
from paperline.methods.ztsurv.segment import LYMPHOCYTE, STROMA, TUMOUR, dice
from paperline.methods.ztsurv.train import FoldResult, c_index, out_of_fold
from paperline.metrics import MethodMetrics
from paperline.seeds import mean_over_seeds

POOLING = ("mean_pool", "abmil")
COMPUTE_RATIOS = ("pixel_ratio_read", "pixel_ratio_processed", "time_ratio")  # 20x patch tiling over 50x


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


def seed_rows(results: dict[str, dict[int, list[FoldResult]]], time: np.ndarray,
              event: np.ndarray) -> dict[int, dict[str, dict]]:
    """{seed: {method: method_row}} from each method's fold results per seed."""
    out: dict[int, dict[str, dict]] = {}
    for method, by_seed in results.items():
        for seed, folds in by_seed.items():
            out.setdefault(seed, {})[method] = method_row(folds, time, event)
    return out


def mean_rows(per_seed: dict[int, dict[str, dict]]) -> dict[str, dict]:
    """A row per method: the mean over seeds (`c_index_mean_std`, `c_index_oof_std`: the sample std
    over seeds; `c_index_std`: the mean over seeds of the spread over folds; `c_index_min` / `_max`:
    over every seed's folds; `logrank_p`: the median over seeds), with the seed count."""
    methods = list(dict.fromkeys(m for rows in per_seed.values() for m in rows))
    out = {}
    for m in methods:
        rows = [per_seed[s][m] for s in sorted(per_seed) if m in per_seed[s]]
        pvalues = [r["logrank_p"] for r in rows if r["logrank_p"] is not None]
        numeric = [{k: v for k, v in r.items() if k != "logrank_p"} for r in rows]
        out[m] = (mean_over_seeds(numeric, spread=lambda k: k in ("c_index_mean", "c_index_oof"))
                  | {"c_index_min": min(r["c_index_min"] for r in rows), "c_index_max": max(r["c_index_max"] for r in rows),
                     "logrank_p": float(np.median(pvalues)) if pvalues else None, "seeds": len(rows)})
    return out


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


def generator_truth(data_dir: Path, cohort: CohortGraphs) -> tuple[dict, dict]:
    """(the generator's facts per patient, its label maps on each thumbnail's grid) of the embedded
    cohort; ({}, {}) for a cohort of real slides (no generator.json)."""
    from PIL import Image

    from paperline.data.wsi_prep import COHORT_DIR, THUMB_DIR

    data_dir = Path(data_dir)
    gen_path = data_dir / COHORT_DIR / "generator.json"
    if not gen_path.exists():
        return {}, {}
    gen = read_json(gen_path)
    facts = {p["patient_id"]: p for p in gen["patients"]}
    thumbs = read_json(data_dir / THUMB_DIR / "index.json")["slides"]
    truth = {}
    for pid in cohort.patient_ids:
        t = np.asarray(Image.open(data_dir / COHORT_DIR / "truth" / f"{pid}.png"))
        e = thumbs[pid]
        truth[pid] = truth_on_thumbnail(t, cohort.labels[pid].shape, tuple(e["base_size"]), e["mpp"], gen["design_um"])
    return facts, truth


def oracle(facts: dict, cohort: CohortGraphs) -> dict:
    """The c-index of what the generator knows: the ceiling the images encode (its risk η) and its
    tumour–lymphocyte contact score ({} without generator facts)."""
    if not facts:
        return {}
    eta = np.array([facts[p]["eta"] for p in cohort.patient_ids])
    contact = np.array([facts[p]["tl_contact"] for p in cohort.patient_ids])
    return {"c_index_generator_eta": c_index(cohort.event, cohort.time, eta),
            "c_index_generator_contact": c_index(cohort.event, cohort.time, -contact)}


def baseline(rows: dict[str, dict]) -> str | None:
    """The strongest pooling baseline (the comparison the paper's claim is about); composition Cox
    when no pooling model ran."""
    pooling = [m for m in POOLING if m in rows]
    if pooling:
        return max(pooling, key=lambda m: rows[m]["c_index_mean"])
    return "composition_cox" if "composition_cox" in rows else None


def headline(rows: dict[str, dict], ceiling: dict, segmentation: dict | None, compute: dict | None) -> dict:
    """ZTSurv's c-index against each baseline, the generator's ceiling, segmentation Dice and the
    compute ratios 20x / 50x."""
    out: dict = {}
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
    out |= ceiling
    out |= {f"segmentation_{key}": value for key, value in (segmentation or {}).items()}
    out |= {f"compute_{key}": compute[key] for key in COMPUTE_RATIOS if compute}
    return out


def compute_table(compute: dict) -> dict[str, dict]:
    """The compute accounting as a row per pipeline (per-slide means over the timed slides)."""
    rows = {}
    for name, suffix in (("pipeline_50x", "50x"), ("patch_tiles_20x", "20x")):
        rows[name] = {"slides": compute["slides"]} | {
            key.removesuffix(f"_{suffix}"): value for key, value in compute.items() if key.endswith(f"_{suffix}")}
    return rows


def method_metrics(rows: dict[str, dict], cohort: CohortGraphs, compute: dict | None, facts: dict, truth: dict,
                   profile: str, per_seed: dict[int, dict[str, dict]] | None = None) -> MethodMetrics:
    """metrics/ztsurv.json: a row per method (`mean_rows`: c-index over folds and out of fold, the
    mean over seeds), the strongest pooling baseline as the baseline, primary metric the mean
    c-index over folds; headline: ZTSurv's gains (figures; the verdicts are the claims, from
    `per_seed`), the generator's ceiling, segmentation Dice where the truth is known, compute
    ratios; the compute accounting as a table; the cohort and the per-seed c-index in details."""
    segmentation = segmentation_scores(cohort.labels, truth) if truth else None
    cohort_facts = {"patients": len(cohort.time), "events": int(cohort.event.sum()), "failed_slides": len(cohort.failed),
                    "til_maps_real": sum(s == "til-map" for s in cohort.til_sources.values()),
                    "til_maps_stand_in": sum(s == "stand-in" for s in cohort.til_sources.values())}
    return MethodMetrics(method="ztsurv", profile=profile, headline=headline(rows, oracle(facts, cohort), segmentation, compute),
                         baseline=baseline(rows), primary_metric="c_index_mean", higher_is_better=True, rows=rows,
                         tables={"compute_accounting": compute_table(compute)} if compute else {},
                         details={"cohort": cohort_facts} | (
                             {"seeds": sorted(per_seed), "c_index_per_seed": {
                                 m: {str(s): per_seed[s][m]["c_index_mean"] for s in sorted(per_seed) if m in per_seed[s]}
                                 for m in rows}} if per_seed else {}),
                         claims=claims.evaluate(per_seed) if per_seed else [])
