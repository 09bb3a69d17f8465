"""The paper's claims (Garrod & Keating, deep UFMs under cross-entropy), as this run measures them.

1. At depth L = 1 the optimum is deep neural collapse: trained UFMs reach the closed-form DNC
   objective f_DNC* with logits of rank K−1 (two `exact` identities against the closed form, on
   the best seed of each K, worst over K).
2. At depth, DNC is not optimal: for K = 10 and L ≥ 4 training finds solutions below f_DNC*
   (trained objective − f_DNC*, lower) whose logits have rank below K−1 (rank(Z) − (K−1), lower).
3. DNC persists, the more so the wider the model: the share of (K, L ≥ 2) groups a seed ends at
   DNC in is higher at the widest width than at the narrowest.
4. Against doing nothing (trivial): training lowers the objective below the untrained one.

Per-seed figures: the grid trains `seeds` runs per (K, L, width), each from its own generator
(seed index, K, L, width); a paired claim takes one value per seed index, the mean over the runs
of that index the claim covers (the widths of one (K, L), or the whole grid), so its `seeds` is the
profile's seeds. A diverged run (no objective) drops out of both sides.
"""
from __future__ import annotations

from paperline.claims import Claim, ClaimSpec
from paperline.methods.dnc.ufm import UFMGroupResult

L1_OBJECTIVE_TOL = 1e-3  # relative distance to f_DNC* the old claim allowed (the best seed, each K)
K_DEEP = 10
DEEP_DEPTHS = (4, 6, 8)  # L ≥ 4 of the grids (smoke 4, 6; paper 4, 6, 8)


def _deep_specs(K: int, L: int) -> tuple[ClaimSpec, ClaimSpec]:
    row = f"K{K}_L{L}"
    return (ClaimSpec(name=f"dnc_deep_below_f_dnc_k{K}_l{L}", claim=f"at K={K}, L={L} training beats DNC's optimum",
                      metric="objective", method=row, versus="f_dnc_star", direction="lower"),
            ClaimSpec(name=f"dnc_deep_rank_below_k_minus_1_k{K}_l{L}",
                      claim=f"at K={K}, L={L} the solutions found have rank(Z) below K−1 (low-rank bias)",
                      metric="rank_1e-3", method=row, versus="k_minus_1", direction="lower"))


L1_OBJECTIVE = ClaimSpec(name="dnc_l1_objective_at_f_dnc", claim="at L=1 the optimum is DNC: objective f_DNC*",
                         metric="relative_gap_to_f_dnc_worst_k", method="L1_best_seed", versus="f_dnc_star")
L1_RANK = ClaimSpec(name="dnc_l1_rank_k_minus_1", claim="at L=1 the optimum is DNC: rank(Z) = K−1",
                    metric="rank_gap_to_k_minus_1_worst_k", method="L1_best_seed", versus="k_minus_1")
WIDER_MORE_DNC = ClaimSpec(name="dnc_share_rises_with_width",
                           claim="gradient descent ends at DNC more often the wider the model",
                           metric="share_of_deep_groups_at_dnc", method="widest", versus="narrowest",
                           direction="higher")
BELOW_INITIAL = ClaimSpec(name="dnc_trained_below_initial", claim="training lowers the UFM objective",
                          metric="objective", method="trained", versus="initial", direction="lower", trivial=True)
SPECS: tuple[ClaimSpec, ...] = (L1_OBJECTIVE, L1_RANK, *(s for L in DEEP_DEPTHS for s in _deep_specs(K_DEEP, L)),
                                WIDER_MORE_DNC, BELOW_INITIAL)


def _finished(results: list[UFMGroupResult]) -> list[tuple[UFMGroupResult, dict]]:
    """(group, seed) for every seed that did not diverge (a diverged seed has no objective)."""
    return [(r, s) for r in results for s in r.seeds if s["objective"] is not None]


def _by_seed(pairs: list[tuple[int, float, float]]) -> tuple[dict[int, float], dict[int, float]]:
    """Per seed index, the mean over its runs (groups or widths) of each side of (seed, a, b): one
    value per seed, so `seeds` counts seeds, whatever the grid; both sides over the same runs."""
    runs: dict[int, list[tuple[float, float]]] = {}
    for seed, a, b in pairs:
        runs.setdefault(seed, []).append((a, b))
    return ({s: sum(a for a, _ in ab) / len(ab) for s, ab in runs.items()},
            {s: sum(b for _, b in ab) / len(ab) for s, ab in runs.items()})


def _l1_claims(results: list[UFMGroupResult]) -> list[Claim]:
    best: dict[int, tuple[float, dict]] = {}  # K -> (f_DNC*, the lowest-objective seed over widths)
    for r, s in _finished([r for r in results if r.L == 1]):
        if r.K not in best or s["objective"] < best[r.K][1]["objective"]:
            best[r.K] = (r.f_dnc_star, s)
    if not best:
        return []
    gap = max(abs(s["objective"] - f) / f for f, s in best.values())
    rank_gap = max(abs(s["rank_1e-3"] - (K - 1)) for K, (_, s) in best.items())
    return [L1_OBJECTIVE.exact(gap, 0.0, L1_OBJECTIVE_TOL), L1_RANK.exact(float(rank_gap), 0.0, 0.0)]


def _deep_claims(results: list[UFMGroupResult]) -> list[Claim]:
    claims = []
    for L in DEEP_DEPTHS:
        groups = [r for r in results if r.K == K_DEEP and r.L == L]
        if not groups:
            continue
        below, rank = _deep_specs(K_DEEP, L)
        runs = _finished(groups)
        claims.append(below.paired(*_by_seed([(s["seed_index"], s["objective"], r.f_dnc_star) for r, s in runs])))
        claims.append(rank.paired(*_by_seed([(s["seed_index"], s["rank_1e-3"], r.K - 1) for r, s in runs])))
    return claims


def _width_claim(results: list[UFMGroupResult]) -> list[Claim]:
    deep = [r for r in results if r.L >= 2]
    widths = sorted({r.width // r.K for r in deep})  # width multiples m (d = m·K)
    if len(widths) < 2:
        return []

    def share_at_dnc(m: int) -> dict[int, float]:  # seed index -> share of its (K, L ≥ 2) groups at DNC
        flags: dict[int, list[bool]] = {}
        for r in deep:
            if r.width // r.K == m:
                for s in r.seeds:
                    flags.setdefault(s["seed_index"], []).append(s["is_dnc"])
        return {i: sum(f) / len(f) for i, f in flags.items()}

    return [WIDER_MORE_DNC.paired(share_at_dnc(widths[-1]), share_at_dnc(widths[0]))]


def _trivial_claim(results: list[UFMGroupResult]) -> Claim:
    """Each run's final objective against its own objective at step 0 (the untrained model), the
    mean over the grid's groups per seed index."""
    return BELOW_INITIAL.paired(*_by_seed([(s["seed_index"], s["objective"], r.history["objective"][s["seed_index"]][0])
                                           for r, s in _finished(results)]))


def evaluate(results: list[UFMGroupResult]) -> list[Claim]:
    """Every claim whose setting this run trained (the deep claims need K = 10 at L ≥ 4)."""
    return [*_l1_claims(results), *_deep_claims(results), *_width_claim(results), _trivial_claim(results)]
