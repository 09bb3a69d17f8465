"""The paper's claims (Islamov et al., NGN-M), as this run's step-size sweep measures them.

1. NGN-M is robust to its step-size hyperparameter c: over the c grid, its result stays within the
   band (10%) of its best for more decades of c than SGDM's (the paper's baseline) and Adam's,
   averaged over the problems, and on each problem against SGDM.
2. NGN-M does not diverge where SGD with momentum does: fewer grid points with a diverged run.
3. Against doing nothing (trivial): NGN-M at its best c beats the untrained model on each problem
   (its loss lower, its test accuracy higher).

Per-seed figures: each seed is its own sweep over the whole grid (its own init and minibatch order),
so its decades are counted on its own curve (`seed_decades`), not on the seed-mean curve the rows
use; paired by seed (the same seed gives every optimizer the same init and batches).
"""
from __future__ import annotations

import numpy as np

from paperline.claims import Claim, ClaimSpec
from paperline.methods.ngn_m.problems import PRIMARY_METRIC
from paperline.methods.ngn_m.summary import seed_columns, seed_decades
from paperline.methods.ngn_m.sweep import VariantResult

METHOD, BASELINE = "ngn_m", "sgdm"
# the problems of the smoke and paper profiles that SGDM and NGN-M both sweep, and their kinds
# (a claim is stated on a problem of that kind only, so its direction is the kind's)
SGDM_PROBLEMS = {"least_squares": "least_squares", "rosenbrock": "rosenbrock", "digits": "digits",
                 "cifar10_resnet20": "cifar", "cifar100_resnet110": "cifar"}
PROBLEMS = SGDM_PROBLEMS | {"lm": "text_lm"}

WIDER_THAN = {versus: ClaimSpec(name=f"ngn_m_wider_band_than_{versus}",
                                claim=f"robust to the step size: more decades of c near its best than {versus.upper()}",
                                metric="mean_decades_per_seed", method=METHOD, versus=versus, direction="higher")
              for versus in ("sgdm", "adam")}
WIDER_ON = {p: ClaimSpec(name=f"ngn_m_wider_band_than_sgdm_{p}",
                         claim=f"on {p}: more decades of c near its best than SGDM",
                         metric=f"{p}_decades_per_seed", method=METHOD, versus=BASELINE, direction="higher")
            for p in SGDM_PROBLEMS}
FEWER_DIVERGENCES = ClaimSpec(name="ngn_m_fewer_divergences_than_sgdm", claim="does not diverge where SGDM does",
                              metric="diverged_c_points_per_seed", method=METHOD, versus=BASELINE, direction="lower")
BEATS_INITIAL = {p: ClaimSpec(name=f"ngn_m_best_beats_initial_{p}", claim=f"on {p}: training beats the untrained model",
                              metric=f"{p}_{PRIMARY_METRIC[kind][0]}", method=METHOD, versus="initial",
                              direction="higher" if PRIMARY_METRIC[kind][1] else "lower", trivial=True)
                 for p, kind in PROBLEMS.items()}
SPECS: tuple[ClaimSpec, ...] = (*WIDER_THAN.values(), *WIDER_ON.values(), FEWER_DIVERGENCES, *BEATS_INITIAL.values())


def seed_best(v: VariantResult) -> dict[int, float]:
    """Each seed's best primary metric over the grid (nan where every c diverged)."""
    metric, higher = PRIMARY_METRIC[v.kind]
    finals = v.finals(metric)
    pick = np.nanmax if higher else np.nanmin
    return {s: float(pick(finals[:, j])) if np.isfinite(finals[:, j]).any() else float("nan")
            for j, s in enumerate(seed_columns(v))}


def seed_diverged(variants: list[VariantResult]) -> dict[int, int]:
    """Per seed, the (problem, c) points at which that seed's run diverged, over the problems."""
    counts: dict[int, int] = {}
    for v in variants:
        for r in v.runs:
            counts[r.seed] = counts.get(r.seed, 0) + int(r.diverged)
    return counts


def evaluate(variants: list[VariantResult], band: float) -> list[Claim]:
    """The claims whose optimizers and problems this run swept."""
    by = {(v.problem, v.optimizer): v for v in variants}
    problems = list(dict.fromkeys(v.problem for v in variants))
    claims = []

    def mean_decades(optimizer: str, shared: list[str]) -> dict[int, float]:
        per_problem = [seed_decades(by[p, optimizer], band) for p in shared]
        seeds = set.intersection(*(set(d) for d in per_problem))
        return {s: float(np.mean([d[s] for d in per_problem])) for s in sorted(seeds)}

    for versus, spec in WIDER_THAN.items():
        shared = [p for p in problems if (p, METHOD) in by and (p, versus) in by]
        if shared:
            claims.append(spec.paired(mean_decades(METHOD, shared), mean_decades(versus, shared)))
    for p, spec in WIDER_ON.items():
        if (p, METHOD) in by and (p, BASELINE) in by:
            claims.append(spec.paired(seed_decades(by[p, METHOD], band), seed_decades(by[p, BASELINE], band)))
    shared = [p for p in problems if (p, METHOD) in by and (p, BASELINE) in by]
    if shared:
        claims.append(FEWER_DIVERGENCES.paired(seed_diverged([by[p, METHOD] for p in shared]),
                                               seed_diverged([by[p, BASELINE] for p in shared])))
    for p, spec in BEATS_INITIAL.items():
        v = by.get((p, METHOD))
        if v is not None and v.kind == PROBLEMS[p]:
            metric = PRIMARY_METRIC[v.kind][0]
            claims.append(spec.paired(seed_best(v), {s: m.get(metric) for s, m in v.initial.items()}))
    return claims
