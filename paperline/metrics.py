"""The one shape of `results/<method>.json` (the run's whole record), validated when it is written
and when it is read. (`metrics/<method>.json`, what `dvc metrics show` prints, is its claims'
`paperline.claims.outcome_counts`.)

    {"method": "tpa", "profile": "smoke",
     "headline": {"tpa_val_loss_vs_mha": 0.888, ...},       # the figures a reader looks at first
     "baseline": "mha", "primary_metric": "val_loss", "higher_is_better": false,
     "rows": {"mha": {"val_loss": 4.09, ...}, "tpa": {...}}, # the comparison: one row per variant
     "tables": {"paper_models": {"baseline": {...}}},       # further tables, rendered under a title
     "details": {...},                                      # anything else (curves, sweeps, settings)
     "claims": [{"name": ..., "verdict": "shown", ...}]}    # the paper's claims (paperline.claims)

Rows are keyed by variant name, the same name the variant's MLflow child run carries, so a row's
columns land on that run under the same metric names and the MLflow chart view lines variants up.
With a baseline and a primary metric, every row gets `<primary>_vs_baseline` (its value over the
baseline's), computed here so no method computes it its own way.

A verdict lives in `claims` only (`paperline.claims.Claim`, its verdict re-derived from its seeds
and interval when validated): a headline key that names a claim is refused.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypeGuard

from pydantic import Field, field_validator, model_validator

from paperline.claims import Claim
from paperline.config import StrictModel

Scalar = bool | int | float | str | None
Row = dict[str, Scalar]


class MetricsError(ValueError):
    """A metrics record that does not have the shape above; the message names the key."""


class MethodMetrics(StrictModel):
    method: str
    profile: str
    headline: dict[str, Scalar] = Field(default_factory=dict)
    baseline: str | None = None
    primary_metric: str | None = None
    higher_is_better: bool = False
    rows: dict[str, Row]
    tables: dict[str, dict[str, Row]] = Field(default_factory=dict)
    details: dict[str, Any] = Field(default_factory=dict)
    claims: list[Claim] = Field(default_factory=list)

    @field_validator("headline")
    @classmethod
    def _no_claims_in_the_headline(cls, headline: dict[str, Scalar]) -> dict[str, Scalar]:
        named = [key for key in headline if "claim" in key]
        if named:
            raise ValueError(f"headline keys {named} name claims: a claim is an entry of `claims` "
                             "(paperline.claims.ClaimSpec), its verdict computed from the seeds")
        return headline

    @field_validator("claims")
    @classmethod
    def _unique_claim_names(cls, claims: list[Claim]) -> list[Claim]:
        names = [c.name for c in claims]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"claim names {repeated} repeated")
        return claims

    @field_validator("rows")
    @classmethod
    def _some_rows(cls, rows: dict[str, Row]) -> dict[str, Row]:
        if not rows:
            raise ValueError("the comparison table has no rows")
        return rows

    @model_validator(mode="after")
    def _baseline_and_primary(self):
        if self.baseline is not None and self.baseline not in self.rows:
            raise ValueError(f"baseline {self.baseline!r} is not a row (rows: {', '.join(self.rows)})")
        if self.primary_metric is not None:
            lacking = [name for name, row in self.rows.items() if self.primary_metric not in row]
            if lacking:
                raise ValueError(f"primary metric {self.primary_metric!r} missing from rows {lacking}")
        return self

    def vs_baseline(self) -> dict[str, float]:
        """Each row's primary metric over the baseline's (rows with a non-numeric value are left out)."""
        if self.baseline is None or self.primary_metric is None:
            return {}
        base = self.rows[self.baseline][self.primary_metric]
        if not _is_number(base) or base == 0:
            return {}
        ratios: dict[str, float] = {}
        for name, row in self.rows.items():
            value = row[self.primary_metric]
            if _is_number(value):
                ratios[name] = value / base
        return ratios

    def with_ratios(self) -> "MethodMetrics":
        """A copy whose rows carry `<primary>_vs_baseline`."""
        ratios = self.vs_baseline()
        if not ratios:
            return self
        key = f"{self.primary_metric}_vs_baseline"
        rows: dict[str, Row] = {}
        for name, row in self.rows.items():  # the ratio right after the primary metric's column
            rows[name] = {}
            for column, value in row.items():
                rows[name][column] = value
                if column == self.primary_metric and name in ratios:
                    rows[name][key] = ratios[name]
        return self.model_copy(update={"rows": rows})


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def table_columns(rows: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The columns of a table of rows, in order of first appearance."""
    columns: dict[str, None] = {}
    for row in rows.values():
        columns.update(dict.fromkeys(row))
    return list(columns)


def numeric(row: dict[str, Any]) -> dict[str, float]:
    """The finite numbers of a row (what MLflow can chart)."""
    return {k: float(v) for k, v in row.items() if _is_number(v)}


def validate_metrics(record: dict[str, Any], where: str) -> MethodMetrics:
    """A parsed metrics file as MethodMetrics; MetricsError names the file and the key."""
    from pydantic import ValidationError

    try:
        return MethodMetrics.model_validate(record)
    except ValidationError as err:
        lines = [f"{where}: {'.'.join(str(p) for p in e['loc']) or '<record>'}: {e['msg']}" for e in err.errors()]
        raise MetricsError("invalid metrics:\n  " + "\n  ".join(lines)) from None
