"""The comparison of a CodeMerge run (a row per variant: the mean over seeds of each seed's row),
its claims (paperline/methods/codemerge/claims.py, paired by seed) and the gains as plain figures
(spec (e) "Expected": CodeMerge ≥ PL/TENT, does not collapse, matches MOS-like accuracy at a
fraction of the merge cost).

`results` maps variant -> seed -> the StreamResult of that seed's stream."""
from __future__ import annotations

import numpy as np

from paperline.methods.codemerge import claims as codemerge_claims
from paperline.methods.codemerge.config import CodeMergeConfig
from paperline.methods.codemerge.tta import StreamResult, corruption_accuracy, window_accuracy
from paperline.metrics import MethodMetrics
from paperline.seeds import mean_over_seeds

PRIMARY = "online_accuracy"
BASELINES = ("source", "tent", "pl", "ema", "mos")
Results = dict[str, dict[int, StreamResult]]


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def variant_row(cfg: CodeMergeConfig, result: StreamResult) -> dict:
    acc = result.accuracy
    return {
        PRIMARY: window_accuracy(acc),  # online: each batch predicted before the step it causes
        "early_accuracy": window_accuracy(acc, first=cfg.stream.early_batches),
        "tail_accuracy": window_accuracy(acc, last=cfg.stream.tail_batches),
        "teacher_accuracy": window_accuracy(result.teacher_accuracy) if result.teacher_accuracy else None,
        "merges": len(result.merge_batches),
        "bank_size": result.bank_size,
        "merge_seconds": result.merge_seconds,
        "merge_forward_passes": result.merge_forward_passes,
        "adapt_seconds": result.adapt_seconds,
        **{f"accuracy_{name}": value for name, value in corruption_accuracy(result, cfg).items()},
    }


def seed_rows(cfg: CodeMergeConfig, results: Results) -> dict[int, dict[str, dict]]:
    """{seed: {variant: row}}, each row's `collapsed` against the source model's last window on the
    same seed's stream."""
    out: dict[int, dict[str, dict]] = {}
    for v in cfg.variants:
        for seed, result in results[v].items():
            out.setdefault(seed, {})[v] = variant_row(cfg, result)
    for rows in out.values():
        source_tail = rows["source"]["tail_accuracy"]
        for row in rows.values():
            row["collapsed"] = row["tail_accuracy"] < cfg.collapse_fraction * source_tail
    return out


def summarize(cfg: CodeMergeConfig, per_seed: dict[int, dict[str, dict]]) -> dict[str, dict]:
    """Rows in the order of cfg.variants: the mean over seeds of every figure (a variant without a
    teacher has no teacher accuracy), the online accuracy's sample std over seeds, and on how many
    seeds the variant collapsed."""
    rows: dict[str, dict] = {}
    for v in cfg.variants:
        mine = [by[v] for by in per_seed.values()]
        figures = [{k: x for k, x in r.items() if k != "collapsed" and x is not None} for r in mine]
        rows[v] = mean_over_seeds(figures, spread=lambda key: key == PRIMARY) | {
            "collapsed_seeds": sum(r["collapsed"] for r in mine), "seeds": len(mine)}
    return rows


def headline(cfg: CodeMergeConfig, rows: dict[str, dict]) -> dict:
    """CodeMerge's online accuracy minus each baseline's (whole stream and the first window), its
    merge cost over MOS-like's (means over seeds): plain figures; the verdicts are the claims."""
    cm = rows["codemerge"]
    out: dict = {"codemerge_online_accuracy": cm[PRIMARY]}
    for b in BASELINES:
        if b in rows:
            out[f"online_gain_vs_{b}"] = cm[PRIMARY] - rows[b][PRIMARY]
            out[f"early_gain_vs_{b}"] = cm["early_accuracy"] - rows[b]["early_accuracy"]
    mos = rows.get("mos")
    if mos:
        out["merge_seconds_ratio_vs_mos"] = _ratio(cm["merge_seconds"], mos["merge_seconds"])
        out["merge_forward_passes_ratio_vs_mos"] = _ratio(cm["merge_forward_passes"], mos["merge_forward_passes"])
    out["collapsed_variants"] = ",".join(v for v, r in rows.items() if r["collapsed_seeds"]) or "none"
    return out


def mean_curves(results: Results) -> dict[str, list[float]]:
    """variant -> the student's accuracy per batch, the mean over seeds (the plots' curves)."""
    return {v: np.mean([r.accuracy for r in by.values()], axis=0).tolist() for v, by in results.items()}


def method_metrics(cfg: CodeMergeConfig, results: Results, source_record: dict, profile: str) -> MethodMetrics:
    """metrics/codemerge.json: a row per variant (the mean over seeds), source-only as the baseline,
    the gains as the headline, the claims; the per-seed rows, per-batch curves and the source model's
    record as details."""
    per_seed = seed_rows(cfg, results)
    rows = summarize(cfg, per_seed)
    return MethodMetrics(
        method="codemerge", profile=profile, headline=headline(cfg, rows),
        baseline="source", primary_metric=PRIMARY, higher_is_better=True, rows=rows,
        claims=codemerge_claims.evaluate(per_seed),
        details={"source_model": {k: source_record.get(k) for k in
                                  ("source", "checkpoint", "parameters", "train_images", "test_images",
                                   "train_accuracy", "test_accuracy", "train_seconds")},
                 "seed_rows": {str(seed): by for seed, by in per_seed.items()},
                 "accuracy_per_batch": {v: {str(s): r.accuracy for s, r in results[v].items()} for v in cfg.variants},
                 "merge_batches": {v: {str(s): r.merge_batches for s, r in results[v].items()}
                                   for v in cfg.variants if any(r.merge_batches for r in results[v].values())},
                 "selected": {v: {str(s): r.selected for s, r in results[v].items()}
                              for v in cfg.variants if any(r.selected for r in results[v].values())}})
