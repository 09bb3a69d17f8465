"""Per-(K, L) summary of a trained grid: theory against the best trained seed, and how often
training ends at DNC, and the metrics record of a run (`method_metrics`) with its claims."""
from __future__ import annotations

from collections import defaultdict

from paperline.methods.dnc import claims, theory
from paperline.methods.dnc.config import DNCConfig
from paperline.methods.dnc.ufm import UFMGroupResult, json_safe
from paperline.metrics import MethodMetrics


def best_seed(results: list[UFMGroupResult]) -> dict | None:
    """The seed with the lowest final objective over these groups (diverged seeds excluded)."""
    seeds = [s for r in results for s in r.seeds if s["objective"] is not None]
    return min(seeds, key=lambda s: s["objective"]) if seeds else None


def summarize(cfg: DNCConfig, results: list[UFMGroupResult]) -> dict:
    """{"K{K}_L{L}": {...}} over the (K, L) pairs present in results; all widths of a pair pooled.
    nc1 is the pinv form (the spec's NC1); the trace form is in each group's per-seed results."""
    groups = defaultdict(list)
    for r in results:
        groups[(r.K, r.L)].append(r)
    n = cfg.samples_per_class
    summary = {}
    for (K, L), rs in sorted(groups.items()):
        best = best_seed(rs)
        all_seeds = [s for r in rs for s in r.seeds]
        summary[f"K{K}_L{L}"] = {
            "dnc_objective": theory.f_dnc_min(K, n, L, cfg.lam)[0],
            "cosine_objective": theory.f_cos_min(K, n, L, cfg.lam)[0],
            "best_trained_objective": best["objective"] if best else None,
            "numerical_rank_best": best["rank_1e-3"] if best else None,
            "dnc_fraction": sum(s["is_dnc"] for s in all_seeds) / len(all_seeds),
            "nc1": best["nc1"] if best else None,
            "nc1_trace": best["nc1_trace"] if best else None,
            "nc2": best["nc2"] if best else None,
            "nc3": best["nc3"] if best else None,
            "dnc_fraction_by_width": {
                r.width: sum(s["is_dnc"] for s in r.seeds) / len(r.seeds)
                for r in sorted(rs, key=lambda r: r.width)},
        }
    return json_safe(summary)


def persistence(summary: dict, K_deep: int = 10, tol: float = 1e-3) -> dict:
    """The share of seeds still ending at DNC where a lower-rank solution beat it (the best trained
    objective below f_DNC* with rank < K−1), over all K with L ≥ 2 and for K = K_deep alone: a plain
    figure; the verdicts are in `paperline.methods.dnc.claims`."""
    rows = {(int(k.split("_")[0][1:]), int(k.split("_")[1][1:])): v for k, v in summary.items()}

    def beats_dnc(K, row):
        return (row["best_trained_objective"] is not None
                and row["best_trained_objective"] < row["dnc_objective"] * (1 - tol)
                and row["numerical_rank_best"] < K - 1)

    beaten = [(K, row["dnc_fraction"]) for (K, L), row in rows.items() if L >= 2 and beats_dnc(K, row)]
    beaten_deep = [f for K, f in beaten if K == K_deep]
    return {
        "dnc_persistence_where_beaten": sum(f for _, f in beaten) / len(beaten) if beaten else None,
        f"dnc_persistence_where_beaten_K{K_deep}": (sum(beaten_deep) / len(beaten_deep)
                                                   if beaten_deep else None),
    }


def method_metrics(cfg: DNCConfig, summary: dict, results: list[UFMGroupResult], profile: str) -> MethodMetrics:
    """metrics/dnc.json: the persistence figures as headline, a row per (K, L) with the share of
    seeds at DNC per width multiple (d = m·K) as columns of its own, and the claims computed from
    every seed's run. No baseline variant: each row is compared with its own closed forms f_DNC*
    and f_cos*."""
    rows = {}
    for variant, entry in summary.items():
        K = int(variant.split("_")[0][1:])
        rows[variant] = {k: v for k, v in entry.items() if k != "dnc_fraction_by_width"} | {
            f"dnc_fraction_width_{int(d) // K}K": f for d, f in entry["dnc_fraction_by_width"].items()}
    return MethodMetrics(method="dnc", profile=profile, headline=persistence(summary),
                         primary_metric="best_trained_objective", rows=rows, claims=claims.evaluate(results))
