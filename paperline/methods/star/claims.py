"""STAR's claims, computed from the run's per-seed values.

The paper's main claims, in our words:
1. With the same feedback budget, STAR's policy earns more true reward than PEBBLE's (and SURF's,
   and MRN's where it runs: the paper's headline, +34.8% over MRN):
   a higher normalised return, (R − R_random) / (R_oracle − R_random) of the same seed.
2. It beats doing nothing: above a uniformly random policy, the trivial baseline, scored on the same
   evaluation episodes (its normalised return is 0 by the normaliser's definition).
3. Both of its parts matter: STAR above STAR without the preference margin (PMR) and above STAR
   without the policy regulariser (PR).
4. PR curbs the critic's overestimation: STAR's signed relative overestimation (the critic's mean
   value minus the current policy's discounted true return, over its size, the mean over the
   evaluation points from the first labels on: the paper's measure) below PEBBLE's.
5. PMR makes the reward model generalise: its held-out preference accuracy (PMR alone) above PEBBLE's.
6. Offline, with one preference reward model for all: STAR's in-sample value with
   advantage-weighted extraction above IQL's expectile value and plain AWR, above the random policy
   (trivial) and above the data's own mean episode; and above the paper's baselines where they run:
   MR (IQL on a plain Bradley–Terry reward model of its own) and Preference Transformer (IQL on
   the per-step rewards of a Preference Transformer fitted on the same labels).

The online claims are stated per kind of task (`continuous`: SAC on a gymnasium control task;
`discrete`: DQN on the grid world), each seed's value the mean over that kind's (task, budget)
settings where both variants ran (one setting at smoke: Pendulum at 40 labels; the grid world at
30), paired by seed: every variant of a seed shares its oracle, its random policy and its evaluation
episodes.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from paperline.claims import Claim, ClaimSpec

KINDS = ("continuous", "discrete")
RANDOM = "random"  # the uniformly random policy, scored on every row's evaluation episodes


def _online(kind: str) -> tuple[ClaimSpec, ...]:
    def spec(name, claim, metric, method, versus, direction="higher", trivial=False):
        return ClaimSpec(name=f"{name}_{kind}", claim=f"{claim} ({kind} tasks)", metric=metric, method=method,
                         versus=versus, direction=direction, trivial=trivial)

    return (
        spec("star_above_random", "beats a random policy", "normalized_return", "star", RANDOM, trivial=True),
        spec("star_above_pebble", "more true reward than PEBBLE at the same feedback", "normalized_return",
             "star", "pebble"),
        spec("star_above_surf", "more true reward than SURF at the same feedback", "normalized_return", "star", "surf"),
        spec("star_above_mrn", "more true reward than MRN at the same feedback (the paper's headline baseline)",
             "normalized_return", "star", "mrn"),
        spec("star_above_star_no_pmr", "the preference margin (PMR) helps", "normalized_return", "star",
             "star_no_pmr"),
        spec("star_above_star_no_pr", "the policy regulariser (PR) helps", "normalized_return", "star", "star_no_pr"),
        spec("star_less_overestimation", "less value overestimation than PEBBLE", "overestimation_rel", "star",
             "pebble", direction="lower"),
        spec("pmr_pref_accuracy_above_pebble", "PMR's reward model predicts held-out preferences better",
             "pref_accuracy", "star_no_pr", "pebble"),
    )


OFFLINE_SPECS: tuple[ClaimSpec, ...] = (
    ClaimSpec(name="offline_star_above_random", claim="offline: beats a random policy", metric="normalized_return",
              method="star", versus=RANDOM, trivial=True),
    ClaimSpec(name="offline_star_above_iql", claim="offline: STAR's value beats IQL's with the same reward model",
              metric="normalized_return", method="star", versus="iql"),
    ClaimSpec(name="offline_star_above_awr", claim="offline: STAR's value beats plain AWR with the same reward model",
              metric="normalized_return", method="star", versus="awr"),
    ClaimSpec(name="offline_star_above_mr", claim="offline: STAR beats the paper's MR baseline (IQL on a plain "
              "Bradley-Terry reward)", metric="normalized_return", method="star", versus="mr"),
    ClaimSpec(name="offline_star_above_pt", claim="offline: STAR beats the paper's Preference Transformer baseline "
              "(IQL on its non-Markovian rewards)", metric="normalized_return", method="star", versus="pt"),
    ClaimSpec(name="offline_star_above_dataset", claim="offline: improves on the data's behaviour (its mean episode)",
              metric="normalized_return", method="star", versus="dataset"),
)
ONLINE_SPECS: tuple[ClaimSpec, ...] = tuple(s for kind in KINDS for s in _online(kind))
SPECS: tuple[ClaimSpec, ...] = (*ONLINE_SPECS, *OFFLINE_SPECS)

# (kind, task, variant, budget) -> that row's per-seed values, seeds in one order for every row
SeedValues = Mapping[tuple[str, str, str, int | None], Sequence[Mapping[str, float | None]]]


def _value(seed: Mapping[str, float | None], metric: str) -> float | None:
    v = seed.get(metric)
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def online(values: SeedValues) -> list[Claim]:
    """The online claims from per-seed rows, the random policy's among them (variant RANDOM); a
    claim whose two variants share no (task, budget) setting of its kind is left out."""
    out = []
    for spec in ONLINE_SPECS:
        kind = spec.name.rsplit("_", 1)[1]
        settings = sorted({(t, b) for (k, t, v, b) in values if k == kind and v == spec.method}
                          & {(t, b) for (k, t, v, b) in values if k == kind and v == spec.versus})
        if not settings:
            continue
        seeds = len(values[(kind, settings[0][0], spec.method, settings[0][1])])
        method, versus = [], []
        for i in range(seeds):  # a seed's value: the mean over its kind's settings
            a = [_value(values[(kind, t, spec.method, b)][i], spec.metric) for t, b in settings]
            c = [_value(values[(kind, t, spec.versus, b)][i], spec.metric) for t, b in settings]
            ok = [(x, y) for x, y in zip(a, c) if x is not None and y is not None]
            method.append(float(np.mean([x for x, _ in ok])) if ok else None)
            versus.append(float(np.mean([y for _, y in ok])) if ok else None)
        if any(v is not None for v in method):  # a figure no seed has (the oracle's accuracy): no claim
            out.append(spec.paired(method, versus))
    return out


def offline(per_seed: Mapping[str, Sequence[float]]) -> list[Claim]:
    """The offline claims from per-seed normalised returns: extraction (`star`, `iql`, `awr`, `mr`,
    `pt`, `dataset`, `random`) -> one value per seed, seeds in one order; absent variants are left out."""
    return [spec.paired(per_seed[spec.method], per_seed[spec.versus]) for spec in OFFLINE_SPECS
            if spec.method in per_seed and spec.versus in per_seed]
