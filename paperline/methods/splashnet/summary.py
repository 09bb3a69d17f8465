"""metrics/splashnet.json (`method_metrics`): a row per variant, the mean over its seeds (CER
zero-shot and fine-tuned, CTC losses, parameters, each against the baseline) with the seeds'
spread, every seed's own row in details, the paper's parameter / FLOP table, and the feature
statistics that show what rolling time normalization removes.

A smoke-sized CTC fit is chaotic in its seed (issue 25: one variant's zero-shot CER was 29, 12 and
66% at three seeds), so the headline's ratios are of the means over seeds and the claims
(splashnet/claims.py) are read on the seeds' own rows, paired by seed, with the blank decoder (types
nothing) as the trivial baseline in the table `trivial`."""
from __future__ import annotations

from typing import Any

from paperline.methods.splashnet import claims
from paperline.metrics import MethodMetrics
from paperline.seeds import mean_over_seeds

PRIMARY_METRIC = "zero_shot_cer"  # CER (%) on users the generic model never saw
# columns given as a difference from the baseline's (CER points, CTC loss per label) where present
MINUS_BASELINE = ("zero_shot_cer", "finetuned_cer", "zero_shot_ctc_loss", "zero_shot_beam_cer")
# a result's name, seed and curves, and the blank decoder's CER (the trivial baseline's row): not columns
NOT_ROW = ("variant", "seed", "history", "val_history", "blank_cer")
# columns whose spread over seeds is reported beside their mean, as `<column>_std`
SPREAD = ("zero_shot_cer", "finetuned_cer", "zero_shot_beam_cer", "finetuned_beam_cer",
          "zero_shot_cer_minus_baseline", "finetuned_cer_minus_baseline")
RATIOS = (("splashnet_mini", "zero_shot_cer"), ("splashnet_mini", "finetuned_cer"),
          ("splashnet", "zero_shot_cer"), ("splashnet", "finetuned_cer"))


def _mean_rows(rows: list[dict[str, Any]], spread: tuple[str, ...] = ()) -> dict[str, Any]:
    """Column by column, the mean over seeds of the columns every seed has (numbers only), a column
    the seeds share (parameters, steps) as it is, and `<column>_std` (sample std) for `spread`'s."""
    keys = [k for k in rows[0] if all(isinstance(r.get(k), (int, float)) for r in rows)]
    return mean_over_seeds([{k: r[k] for k in keys} for r in rows], spread=spread.__contains__, keep_shared=True)


def variant_rows(results: list[dict]) -> tuple[dict[str, dict], dict[str, dict], dict[str, dict]]:
    """({variant: row}, {variant: {"<metric>/<user>": value}}, {variant: {seed: row}}) from
    train_and_evaluate's results, one per (variant, seed). A seed's row carries its difference from
    the baseline trained at the same seed; a variant's row is the mean over its seeds, with
    `<column>_std` (sample std over seeds) for the CER columns and `seeds` (how many); per-user CER
    is the mean over seeds too."""
    per_seed: dict[str, dict[str, dict]] = {}
    per_user_seed: dict[str, list[dict]] = {}
    for r in results:
        scalars = {k: v for k, v in r.items() if k not in NOT_ROW}
        per_seed.setdefault(r["variant"], {})[str(r["seed"])] = {k: v for k, v in scalars.items() if "/" not in k}
        per_user_seed.setdefault(r["variant"], []).append({k: v for k, v in scalars.items() if "/" in k})
    base = per_seed.get("baseline", {})
    for seeds in per_seed.values():
        for seed, row in seeds.items():
            if seed in base:
                row |= {f"{m}_minus_baseline": row[m] - base[seed][m] for m in MINUS_BASELINE if m in row}
    rows = {}
    for variant, seeds in per_seed.items():
        rows[variant] = _mean_rows(list(seeds.values()), SPREAD) | {"seeds": len(seeds)}
    per_user = {v: _mean_rows(users) for v, users in per_user_seed.items()}
    return rows, per_user, per_seed


def headline(rows: dict[str, dict], per_seed: dict[str, dict], feature_stats: dict[str, float]) -> dict[str, Any]:
    """SplashNet-mini's and SplashNet's mean CER over the baseline's, zero-shot and fine-tuned (the
    paper's comparison as figures; its verdicts are the claims); the cross-user spread of channel
    means before and after RTN."""
    out: dict[str, Any] = {}
    for variant, metric in RATIOS:
        if variant not in rows or "baseline" not in rows:
            continue
        mean_base = rows["baseline"][metric]
        out[f"{variant}_{metric}_vs_baseline"] = rows[variant][metric] / mean_base if mean_base else None
    if "baseline" in per_seed:
        out["seeds"] = len(per_seed["baseline"])
    return out | feature_stats


def method_metrics(rows: dict[str, dict], per_user: dict[str, dict], per_seed: dict[str, dict],
                   paper_models: dict[str, dict], feature_stats: dict[str, float], profile: str,
                   blank: dict[str, dict], **details: Any) -> MethodMetrics:
    """From `variant_rows`: the baseline's row as the baseline, zero-shot CER (mean over seeds) the
    primary metric; the paper's parameter / FLOP table; the blank decoder's row (`blank`:
    claims.blank_rows, {seed: row}), its mean in the table `trivial`; per-seed rows, per-user CER
    and `details` (decoders, ...) in details; the claims, paired by seed."""
    tables = {"paper_models": paper_models}
    if blank:
        tables["trivial"] = {claims.BLANK: mean_over_seeds(list(blank.values())) | {"seeds": len(blank)}}
    return MethodMetrics(
        method="splashnet", profile=profile, headline=headline(rows, per_seed, feature_stats),
        baseline="baseline" if "baseline" in rows else None, primary_metric=PRIMARY_METRIC,
        higher_is_better=False, rows=rows, tables=tables,
        details=details | {"per_seed": per_seed, "per_seed_blank": blank, "per_user": per_user,
                           "test_users": sorted({k.split("/", 1)[1] for r in per_user.values() for k in r})},
        claims=claims.evaluate(per_seed, blank))
