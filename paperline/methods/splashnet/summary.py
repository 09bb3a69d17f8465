"""metrics/splashnet.json (`method_metrics`): a row per variant (CER zero-shot and fine-tuned,
CTC losses, parameters, each against the baseline), the paper's parameter / FLOP table, and the
feature statistics that show what rolling time normalization removes."""
from __future__ import annotations

from typing import Any

from paperline.metrics import MethodMetrics

PRIMARY_METRIC = "zero_shot_cer"  # CER (%) on users the generic model never saw
# columns given as a difference from the baseline's (CER points, CTC loss per label) where present
MINUS_BASELINE = ("zero_shot_cer", "finetuned_cer", "zero_shot_ctc_loss", "zero_shot_beam_cer")
NOT_ROW = ("variant", "history", "val_history")  # a result's curves and name: not comparison columns


def variant_rows(results: list[dict]) -> tuple[dict[str, dict], dict[str, dict]]:
    """({variant: row}, {variant: {"<metric>/<user>": value}}) from train_and_evaluate's results: the
    comparison's columns, with their difference from the baseline, and the per-user CER apart."""
    rows, per_user = {}, {}
    for r in results:
        scalars = {k: v for k, v in r.items() if k not in NOT_ROW}
        rows[r["variant"]] = {k: v for k, v in scalars.items() if "/" not in k}
        per_user[r["variant"]] = {k: v for k, v in scalars.items() if "/" in k}
    if "baseline" in rows:
        base = rows["baseline"]
        for row in rows.values():
            row |= {f"{m}_minus_baseline": row[m] - base[m] for m in MINUS_BASELINE if m in row}
    return rows, per_user


def headline(rows: dict[str, dict], feature_stats: dict[str, float]) -> dict[str, Any]:
    """The paper's claims in numbers: SplashNet-mini's and SplashNet's CER over the baseline's,
    zero-shot and fine-tuned; the cross-user spread of channel means before and after RTN."""
    out: dict[str, Any] = {}
    for variant in ("splashnet_mini", "splashnet"):
        for metric in ("zero_shot_cer", "finetuned_cer"):
            if variant in rows and "baseline" in rows:
                base = rows["baseline"][metric]
                out[f"{variant}_{metric}_vs_baseline"] = rows[variant][metric] / base if base else None
    return out | feature_stats


def method_metrics(rows: dict[str, dict], per_user: dict[str, dict], paper_models: dict[str, dict],
                   feature_stats: dict[str, float], profile: str, **details: Any) -> MethodMetrics:
    """From `variant_rows`: the baseline's row as the baseline, zero-shot CER the primary metric;
    the paper's parameter / FLOP table; per-user CER and `details` (decoders, ...) in details."""
    return MethodMetrics(
        method="splashnet", profile=profile, headline=headline(rows, feature_stats),
        baseline="baseline" if "baseline" in rows else None, primary_metric=PRIMARY_METRIC,
        higher_is_better=False, rows=rows, tables={"paper_models": paper_models},
        details=details | {"per_user": per_user,
                           "test_users": sorted({k.split("/", 1)[1] for r in per_user.values() for k in r})})
