"""Robustness to the step size: per optimizer and problem, how many decades of c keep the final
result within `band` (10%) of that optimizer's best, plus the best result: the rows of
metrics/ngn_m.json (`method_metrics`; a row per optimizer, columns <problem>_decades,
<problem>_best_<metric>, <problem>_best_c, mean_decades over the problems, and diverged_c_points:
grid points, over all problems, where some seed diverged).

The result at one c is the mean over seeds; a c where any seed diverged counts as outside the
band. The band is relative: loss ≤ (1 + band)·best, accuracy ≥ (1 − band)·best. Decades are
log10(c_hi / c_lo) of the contiguous run of grid points around the best c that stay inside
it, so one good point alone counts 0 and the resolution is the grid's spacing.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from paperline.claims import Claim
from paperline.methods.ngn_m.optimizers import NGN_FAMILY
from paperline.methods.ngn_m.problems import PRIMARY_METRIC
from paperline.methods.ngn_m.sweep import VariantResult, json_safe
from paperline.metrics import MethodMetrics

TRACE_POINTS = 500  # a γ_k / loss curve is thinned to at most this many points for MLflow


def seed_mean(variant: VariantResult, metric: str) -> np.ndarray:
    """Mean over seeds at each c; nan where any seed diverged or lacks the metric."""
    values = variant.finals(metric)
    return values.mean(axis=1) if values.size else np.full(len(variant.c_values), np.nan)


def band_decades(c_values: list[float], values: np.ndarray, higher_is_better: bool,
                 band: float) -> dict[str, float | int | None]:
    values = np.asarray(values, dtype=float)
    finite = np.isfinite(values)
    if not finite.any():
        return {"decades": 0.0, "best": None, "best_c": None, "points_in_band": 0}
    best_i = int(np.nanargmax(values) if higher_is_better else np.nanargmin(values))
    best = values[best_i]
    with np.errstate(invalid="ignore"):
        inside = finite & ((values >= (1 - band) * best) if higher_is_better else (values <= (1 + band) * best))
    lo = hi = best_i
    while lo > 0 and inside[lo - 1]:
        lo -= 1
    while hi < len(values) - 1 and inside[hi + 1]:
        hi += 1
    return {"decades": float(math.log10(c_values[hi] / c_values[lo])), "best": float(best),
            "best_c": float(c_values[best_i]), "points_in_band": int(inside.sum())}


def summarize(variants: list[VariantResult], band: float) -> dict[str, dict]:
    """{optimizer: row} over every problem it ran."""
    rows: dict[str, dict] = {}
    for v in variants:
        metric, higher = PRIMARY_METRIC[v.kind]
        stats = band_decades(v.c_values, seed_mean(v, metric), higher, band)
        row = rows.setdefault(v.optimizer, {})
        row[f"{v.problem}_decades"] = stats["decades"]
        row[f"{v.problem}_best_{metric}"] = stats["best"]
        row[f"{v.problem}_best_c"] = stats["best_c"]
        row["diverged_c_points"] = row.get("diverged_c_points", 0) + int((v.diverged() > 0).sum())
        if metric != "loss":  # classifiers: the best final training loss too
            losses = seed_mean(v, "loss")
            row[f"{v.problem}_best_loss"] = float(np.nanmin(losses)) if np.isfinite(losses).any() else None
    grids: dict[str, list[int]] = {}
    for v in variants:
        grids.setdefault(v.optimizer, []).append(len(v.c_values))
    for optimizer, row in rows.items():
        decades = [value for key, value in row.items() if key.endswith("_decades")]
        row["mean_decades"] = float(np.mean(decades))
        # every optimizer sweeps the same c grid of a problem: its tuning, recorded in its row
        row["tuning"] = "c grid of " + ", ".join(map(str, dict.fromkeys(grids[optimizer])))
    return json_safe(rows)


def headline(rows: dict[str, dict], variants: list[VariantResult]) -> dict:
    """The claim in numbers: NGN-M's decades over SGDM's (its baseline), divergences of the NGN
    family against SGD and SGDM, and the widest grid (the most decades a row can have)."""
    def diverged(names):
        present = [rows[n]["diverged_c_points"] for n in names if n in rows]
        return sum(present) if present else None

    gain = (rows["ngn_m"]["mean_decades"] - rows["sgdm"]["mean_decades"]) if {"ngn_m", "sgdm"} <= set(rows) else None
    return {"ngn_m_minus_sgdm_mean_decades": gain, "ngn_family_diverged_c_points": diverged(NGN_FAMILY),
            "sgd_sgdm_diverged_c_points": diverged(("sgd", "sgdm")),
            "grid_decades": max(math.log10(v.c_values[-1] / v.c_values[0]) for v in variants)}


def initial_model(variants: list[VariantResult]) -> dict[str, dict[str, float]]:
    """{problem: {metric: mean over seeds}} of the untrained model (the same for every optimizer)."""
    out: dict[str, dict[str, float]] = {}
    for v in variants:
        if v.problem not in out and v.initial:
            metrics = list(dict.fromkeys(k for m in v.initial.values() for k in m))
            out[v.problem] = json_safe({k: float(np.mean([m[k] if m.get(k) is not None else np.nan
                                                          for m in v.initial.values()])) for k in metrics})
    return out


def seed_columns(v: VariantResult) -> list[int]:
    return sorted({r.seed for r in v.runs})  # the columns of v.finals


def seed_decades(v: VariantResult, band: float) -> dict[int, float]:
    """Each seed's decades of c within the band of its own best (a diverged run counts outside)."""
    metric, higher = PRIMARY_METRIC[v.kind]
    finals = v.finals(metric)
    out: dict[int, float] = {}
    for j, s in enumerate(seed_columns(v)):
        decades = band_decades(v.c_values, finals[:, j], higher, band)["decades"]
        assert isinstance(decades, float)  # band_decades' decades are always a float
        out[s] = decades
    return out



def method_metrics(rows: dict[str, dict], variants: list[VariantResult], band: float, profile: str,
                   claims: Sequence[Claim] = ()) -> MethodMetrics:
    """metrics/ngn_m.json from `summarize`'s rows: a row per optimizer (its MLflow run, under which
    its per-problem sweeps nest), SGDM the baseline, the primary metric the decades of c within the
    band averaged over the problems (higher: more robust to the step size); the claims (computed from
    each seed's own sweep, `paperline.methods.ngn_m.claims`), each seed's decades and the untrained
    model's metrics in details."""
    by_seed: dict[str, dict] = {}
    for v in variants:
        by_seed.setdefault(v.optimizer, {})[v.problem] = {str(s): d for s, d in seed_decades(v, band).items()}
    return MethodMetrics(method="ngn_m", profile=profile, headline=headline(rows, variants),
                         baseline="sgdm" if "sgdm" in rows else None, primary_metric="mean_decades",
                         higher_is_better=True, rows=rows, claims=list(claims),
                         details={"band": band, "decades_by_seed": by_seed, "initial_model": initial_model(variants)})


def c_tag(c: float) -> str:
    """c as an MLflow-safe key part: 1.0e-03, 3.2e01."""
    return f"{c:.1e}".replace("+", "")


def thin(steps: list[int], values: list, points: int = TRACE_POINTS) -> tuple[list[int], list[float]]:
    """At most about `points` of a curve, evenly strided, its missing values dropped."""
    keep = [(s, v) for s, v in zip(steps, values) if v is not None]
    stride = max(1, len(keep) // points)
    keep = keep[::stride]
    return [s for s, _ in keep], [float(v) for _, v in keep]


def variant_curves(result: VariantResult) -> dict[str, tuple[list, list]]:
    """The curves of one (problem, optimizer) sweep, {key: (steps, values)}: final metrics against
    the c index, and the first seed's minibatch loss and γ_k against the step at every c."""
    index = list(range(len(result.c_values)))
    curves: dict[str, tuple[list, list]] = {"diverged_seeds_by_c_index": (index, [int(n) for n in result.diverged()])}
    for m in dict.fromkeys(["loss", PRIMARY_METRIC[result.kind][0]]):
        curves[f"final_{m}_by_c_index"] = (index, [float(x) for x in seed_mean(result, m)])
    for r in result.first_seed_runs():
        curves[f"train_loss/c_{c_tag(r.c)}"] = thin(r.trace_steps, r.loss)
        if result.optimizer in NGN_FAMILY:
            curves[f"gamma/c_{c_tag(r.c)}"] = thin(r.trace_steps, r.gamma)
    return curves


def sweep_table(variants: list[VariantResult], problem: str) -> tuple[list[str], list[list]]:
    """One problem's sweep as a wide table: c, then <optimizer>_<metric> (seed means) and
    <optimizer>_diverged (seeds) per optimizer; what plots/ngn_m/sweep_<problem>.csv holds."""
    of_problem = [v for v in variants if v.problem == problem]
    c_values = of_problem[0].c_values
    metrics = ["loss"] + (["accuracy"] if PRIMARY_METRIC[of_problem[0].kind][0] == "accuracy" else [])
    header = ["c"]
    columns: list[list] = [c_values]
    for v in of_problem:
        for m in metrics:
            header.append(f"{v.optimizer}_{m}")
            columns.append([None if not np.isfinite(x) else float(x) for x in seed_mean(v, m)])
        header.append(f"{v.optimizer}_diverged")
        columns.append([int(n) for n in v.diverged()])
    return header, [list(row) for row in zip(*columns)]
