"""A paper's claim as data, and its verdict computed by the run from per-seed values.

Every method declares its paper's main claims as `ClaimSpec`s (the paper's words in a few words,
the metric, the method's variant, the variant it is compared with, the direction the paper
states) and evaluates them on the values its run measured, one per seed:

    spec = ClaimSpec(name="splashnet_below_baseline_cer", claim="lower zero-shot CER than emg2qwerty",
                     metric="zero_shot_cer", method="splashnet", versus="baseline", direction="lower")
    claim = spec.paired({0: 0.19, 1: 0.27, 2: 0.21}, {0: 0.48, 1: 0.26, 2: 0.67})

The effect is the mean over seeds of the paired difference `method - versus` (in the metric's own
units), with a 95% Student-t interval on those differences (`t95`). The verdict:

- `shown`: at least `MIN_SEEDS` seeds and the interval excludes zero in the paper's direction;
- `reversed`: at least `MIN_SEEDS` seeds and the interval excludes zero the other way;
- `inconclusive`: otherwise, fewer than `MIN_SEEDS` seeds included (a one-seed gap is never a
  verdict, however large);
- no spread: when every seed gives the same difference (a gap of one test image at every seed, a
  count on a grid), the t-interval has no width and says nothing about the noise; such a claim is
  judged by the exact two-sided sign test instead (all n differences on one side: p = 2 * 0.5**n),
  so it takes at least 6 seeds to be `shown` or `reversed`, and stays `inconclusive` at 3;
- `exact` / `not_exact`: a deterministic identity (a lossless merge, an equivariance error, a
  closed form), its measured value checked against a target to a stated tolerance.

A claim against the trivial baseline of its setting (the frozen base, the initial model, random
selection, no adaptation) is marked `trivial`: a method that does not beat doing nothing shows
nothing, so every method declares at least one.

`Claim` re-derives its verdict from its own numbers when it is validated, so a results file can
not carry a `shown` that its seeds and interval do not support.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import Field, model_validator

from paperline.config import StrictModel

MIN_SEEDS = 3
CONFIDENCE = 0.95
INTERVAL = "t95"  # Student-t interval (two-sided, 95%) on the paired per-seed differences
# An interval narrower than this fraction of its bounds is float rounding around one repeated value.
NO_SPREAD = 1e-6

Direction = Literal["higher", "lower"]
Verdict = Literal["shown", "reversed", "inconclusive", "exact", "not_exact"]
VERDICTS: tuple[str, ...] = ("shown", "reversed", "inconclusive", "exact", "not_exact")
NAME_PATTERN = r"^[a-z][a-z0-9_]*$"  # also an MLflow metric-name part: claim.<name>.effect

Values = Mapping[Any, Any] | Sequence[Any]


class ClaimError(ValueError):
    """A claim whose declaration or numbers do not fit together; the message names the claim."""


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def t_interval(differences: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float | None, float | None]:
    """Mean of the differences and its two-sided Student-t interval (None, None for one value)."""
    n = len(differences)
    if n == 0:
        raise ClaimError("no values to summarise")
    mean = math.fsum(differences) / n
    if n == 1:
        return mean, None, None
    from scipy.stats import t

    variance = math.fsum((d - mean) ** 2 for d in differences) / (n - 1)  # sample variance (ddof 1)
    half = float(t.ppf(0.5 + confidence / 2, n - 1)) * math.sqrt(variance / n)
    return mean, mean - half, mean + half


def has_no_spread(low: float | None, high: float | None) -> bool:
    """True when the seeds' differences were all the same value (the interval has no width)."""
    return low is not None and high is not None and high - low <= NO_SPREAD * max(abs(low), abs(high))


def sign_test_p(seeds: int) -> float:
    """Two-sided exact sign test when all `seeds` differences fall on one side of zero."""
    return min(1.0, 2 * 0.5**seeds)


def paired_verdict(direction: Direction, seeds: int, low: float | None, high: float | None) -> Verdict:
    if seeds < MIN_SEEDS or low is None or high is None:
        return "inconclusive"
    if has_no_spread(low, high) and sign_test_p(seeds) >= 1 - CONFIDENCE:
        return "inconclusive"
    above, below = low > 0, high < 0
    if (direction == "higher" and above) or (direction == "lower" and below):
        return "shown"
    if (direction == "higher" and below) or (direction == "lower" and above):
        return "reversed"
    return "inconclusive"


def _pairs(method_values: Values, versus_values: Values, name: str) -> list[tuple[Any, float, float]]:
    """(seed, method value, versus value) for every seed both have a finite value for."""
    if isinstance(method_values, Mapping) != isinstance(versus_values, Mapping):
        raise ClaimError(f"claim {name!r}: pair values by seed (two mappings) or by position (two sequences)")
    if isinstance(method_values, Mapping):
        seeds = [s for s in method_values if s in versus_values]
        pairs = [(s, method_values[s], versus_values[s]) for s in seeds]
    else:
        if len(method_values) != len(versus_values):
            raise ClaimError(f"claim {name!r}: {len(method_values)} method values against "
                             f"{len(versus_values)} baseline values")
        pairs = list(zip(range(len(method_values)), method_values, versus_values))
    return [(s, float(a), float(b)) for s, a, b in pairs if _finite(a) and _finite(b)]


class ClaimSpec(StrictModel):
    """What a paper claims, declared by its method; `paired` / `evaluate` / `exact` give the Claim."""

    name: str = Field(pattern=NAME_PATTERN)
    claim: str  # the paper's claim in a few words of our own
    metric: str
    method: str  # the variant the paper proposes (its row)
    versus: str  # the variant it is compared with ("" for an identity that compares with nothing)
    direction: Direction = "higher"  # the method's metric is higher / lower than versus's in the paper
    trivial: bool = False  # `versus` is the trivial baseline of the setting (doing nothing)

    def paired(self, method_values: Values, versus_values: Values) -> "Claim":
        """The claim from one value per seed for each side, paired by seed (mappings) or position."""
        pairs = _pairs(method_values, versus_values, self.name)
        if not pairs:
            return Claim(**self.model_dump(), kind="paired", seeds=0, interval=INTERVAL, verdict="inconclusive")
        differences = [a - b for _, a, b in pairs]
        effect, low, high = t_interval(differences)
        n = len(pairs)
        return Claim(**self.model_dump(), kind="paired", seeds=n, effect=effect, low=low, high=high,
                     interval=INTERVAL, method_mean=math.fsum(a for _, a, _ in pairs) / n,
                     versus_mean=math.fsum(b for _, _, b in pairs) / n,
                     verdict=paired_verdict(self.direction, n, low, high))

    def evaluate(self, seed_rows: Mapping[Any, Mapping[str, Mapping[str, Any]]]) -> "Claim":
        """The claim from per-seed comparison tables: {seed: {variant: {metric: value}}}."""
        method, versus = {}, {}
        for seed, rows in seed_rows.items():
            if self.method in rows and self.metric in rows[self.method]:
                method[seed] = rows[self.method][self.metric]
            if self.versus in rows and self.metric in rows[self.versus]:
                versus[seed] = rows[self.versus][self.metric]
        if not method or not versus:
            missing = self.method if not method else self.versus
            raise ClaimError(f"claim {self.name!r}: no seed has {missing!r}.{self.metric!r} "
                             f"(variants: {sorted({v for rows in seed_rows.values() for v in rows})})")
        return self.paired(method, versus)

    def exact(self, value: float, target: float, tolerance: float) -> "Claim":
        """A deterministic identity: `value` within `tolerance` of `target` (seeds do not apply)."""
        holds = _finite(value) and abs(value - target) <= tolerance
        return Claim(**self.model_dump(), kind="exact", seeds=1, effect=float(value) if _finite(value) else None,
                     interval="exact", target=target, tolerance=tolerance, verdict="exact" if holds else "not_exact")


class Claim(ClaimSpec):
    """A claim with the numbers of this run and its verdict (re-derived when validated)."""

    kind: Literal["paired", "exact"]
    seeds: int = Field(ge=0)
    effect: float | None = None  # mean paired difference (paired) or the measured value (exact)
    low: float | None = None
    high: float | None = None
    interval: str
    method_mean: float | None = None
    versus_mean: float | None = None
    target: float | None = None
    tolerance: float | None = None
    verdict: Verdict

    @model_validator(mode="after")
    def _verdict_follows_from_the_numbers(self):
        if self.kind == "exact":
            if self.target is None or self.tolerance is None:
                raise ValueError(f"exact claim {self.name!r} needs a target and a tolerance")
            holds = self.effect is not None and abs(self.effect - self.target) <= self.tolerance
            expected = "exact" if holds else "not_exact"
        else:
            if (self.low is None) != (self.high is None) or (self.low is not None and self.high is not None
                                                              and self.low > self.high):
                raise ValueError(f"claim {self.name!r}: interval [{self.low}, {self.high}] is not an interval")
            expected = paired_verdict(self.direction, self.seeds, self.low, self.high)
        if self.verdict != expected:
            raise ValueError(f"claim {self.name!r}: verdict {self.verdict!r} does not follow from its numbers "
                             f"({self.seeds} seeds, interval [{self.low}, {self.high}]): {expected!r}")
        return self

    def effect_text(self) -> str:
        """`-0.29 [-0.51, -0.07]` (paired), `1.3e-14 (target 0 ± 1e-06)` (exact)."""
        if self.effect is None:
            return "n/a"
        if self.kind == "exact":
            return f"{self.effect:.3g} (target {self.target:.3g} ± {self.tolerance:.2g})"
        if self.low is None:
            return f"{self.effect:+.3g} (one seed, no interval)"
        if has_no_spread(self.low, self.high):
            return f"{self.effect:+.3g} (the same at all {self.seeds} seeds: sign test p = {sign_test_p(self.seeds):.2g})"
        return f"{self.effect:+.3g} [{self.low:+.3g}, {self.high:+.3g}]"


def verdict_counts(claims: Sequence[Claim]) -> dict[str, int]:
    """How many claims have each verdict, every verdict named (zeros included)."""
    return {v: sum(c.verdict == v for c in claims) for v in VERDICTS}


def counts_text(claims: Sequence[Claim]) -> str:
    """`5 shown, 1 inconclusive` (the verdicts that occur), or `no claims`."""
    return ", ".join(f"{n} {v}" for v, n in verdict_counts(claims).items() if n) or "no claims"


# The verdicts grouped by what they say of the paper's claim: it held in this run (an interval in
# the paper's direction, an identity within its tolerance), it failed (an interval the other way, an
# identity missed), or the run cannot tell.
OUTCOMES: dict[str, tuple[Verdict, ...]] = {"held": ("shown", "exact"), "failed": ("reversed", "not_exact"),
                                        "inconclusive": ("inconclusive",)}


def outcome_counts(claims: Sequence[Claim]) -> dict[str, int]:
    """`metrics/<method>.json`: how many claims held, failed or are inconclusive. Three keys that
    every method has keep `dvc metrics show --md` one 76-column row per method (DVC gives every key
    of every file a column: the five verdicts would take 103)."""
    counts = verdict_counts(claims)
    return {outcome: sum(counts[v] for v in verdicts) for outcome, verdicts in OUTCOMES.items()}
