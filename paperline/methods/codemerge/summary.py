"""The comparison of a CodeMerge run (a row per variant) and its claims as numbers computed from
the run (spec (e) "Expected": CodeMerge ≥ PL/TENT, does not collapse, matches MOS-like accuracy at
a fraction of the merge cost)."""
from __future__ import annotations

from paperline.methods.codemerge.config import CodeMergeConfig
from paperline.methods.codemerge.tta import StreamResult, corruption_accuracy, window_accuracy
from paperline.metrics import MethodMetrics

PRIMARY = "online_accuracy"
BASELINES = ("source", "tent", "pl", "ema", "mos")


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


def summarize(cfg: CodeMergeConfig, results: dict[str, StreamResult]) -> dict[str, dict]:
    """Rows in the order of cfg.variants; `collapsed` against the source model's last window."""
    rows = {v: variant_row(cfg, results[v]) for v in cfg.variants}
    source_tail = rows["source"]["tail_accuracy"] if "source" in rows else None
    for row in rows.values():
        row["collapsed"] = None if source_tail is None else row["tail_accuracy"] < cfg.collapse_fraction * source_tail
    return rows


def claims(cfg: CodeMergeConfig, rows: dict[str, dict]) -> dict:
    """CodeMerge's online accuracy minus each baseline's (whole stream and the first window), its
    merge cost over MOS-like's, and the claims as booleans (None where a needed row is absent)."""
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
    self_training = [b for b in ("pl", "tent") if b in rows]
    out["claim_geq_pl_tent"] = (all(cm[PRIMARY] >= rows[b][PRIMARY] for b in self_training)
                                if self_training else None)
    out["claim_no_collapse"] = None if cm["collapsed"] is None else not cm["collapsed"]
    out["claim_matches_mos_cheaper"] = (None if not mos or out["merge_seconds_ratio_vs_mos"] is None else
                                        abs(cm[PRIMARY] - mos[PRIMARY]) <= cfg.match_tolerance
                                        and out["merge_seconds_ratio_vs_mos"] < 1)
    out["collapsed_variants"] = ",".join(v for v, r in rows.items() if r["collapsed"]) or "none"
    return out


def method_metrics(cfg: CodeMergeConfig, results: dict[str, StreamResult], source_record: dict,
                   profile: str) -> MethodMetrics:
    """metrics/codemerge.json: a row per variant, source-only as the baseline, the claims as the
    headline; the per-batch curves and the source model's record as details."""
    rows = summarize(cfg, results)
    return MethodMetrics(
        method="codemerge", profile=profile, headline=claims(cfg, rows),
        baseline="source" if "source" in rows else None, primary_metric=PRIMARY, higher_is_better=True,
        rows=rows,
        details={"source_model": {k: source_record.get(k) for k in
                                  ("source", "checkpoint", "parameters", "train_images", "test_images",
                                   "train_accuracy", "test_accuracy", "train_seconds")},
                 "accuracy_per_batch": {v: results[v].accuracy for v in cfg.variants},
                 "merge_batches": {v: results[v].merge_batches for v in cfg.variants if results[v].merge_batches},
                 "selected": {v: results[v].selected for v in cfg.variants if results[v].selected}})
