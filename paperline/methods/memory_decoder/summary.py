"""metrics/memory_decoder.json: one row per (base size, variant) — the base alone, base + kNN-LM and
base + MemDec, the same MemDec for both bases — with the perplexity of each split at the λ chosen
on the domain dev half (the paper tunes λ per domain; λ = 0 is the base alone) and the inference
time per token. No single baseline row: each base size is its own comparison, so the per-size
comparisons (MemDec against kNN-LM) are headline figures. The λ sweeps are details."""
from __future__ import annotations

from paperline.methods.memory_decoder.config import MemoryDecoderConfig
from paperline.methods.memory_decoder.pipeline import BASES, VARIANTS
from paperline.metrics import MethodMetrics

PRIMARY = "domain_ppl"


def variant_row(entry: dict, variant: str, timing: dict) -> dict:
    """One evaluated variant of one base size: the λ chosen on domain_dev, each split's perplexity
    at that λ (the primary metric first), the inference time per token (and over the base's)."""
    best = min(entry["domain_dev"], key=entry["domain_dev"].get)
    ppl = {f"{split}_ppl": sweep[best] for split, sweep in entry.items()}
    return {"lambda": best, PRIMARY: ppl.pop(PRIMARY)} | ppl | {
        "ms_per_token": timing[f"{variant}_ms_per_token"],
        "time_vs_base": 1.0 if variant == "base" else timing[f"{variant}_vs_base"]}


def method_metrics(cfg: MemoryDecoderConfig, bases: dict, datastore: dict, memdec: dict, evaluation: dict,
                   profile: str) -> MethodMetrics:
    rows: dict = {}
    sweeps: dict = {}
    for size in BASES:
        for variant in VARIANTS:
            name = f"{size}/{variant}"
            entry = evaluation["results"][name]
            rows[name] = variant_row(entry, variant, evaluation["timing"][size])
            if variant != "base":  # the base alone has λ = 0 only
                sweeps[name] = {split: {str(lam): v for lam, v in sweep.items()} for split, sweep in entry.items()}
    headline: dict = {}
    for size in BASES:
        headline[f"{size}_memdec_over_knn_lm_{PRIMARY}"] = rows[f"{size}/memdec"][PRIMARY] / rows[f"{size}/knn_lm"][PRIMARY]
        headline[f"{size}_knn_lm_over_memdec_time"] = evaluation["timing"][size]["knn_lm_over_memdec"]
    tables = {"bases": {size: {"params": bases[size]["params"],
                               "general_val_perplexity_train_loop": bases[size]["general_val_perplexity"]}
                        for size in BASES},
              "datastore": {"knn_datastore": datastore},
              "memdec_training": {"memdec": memdec}}
    return MethodMetrics(method="memory_decoder", profile=profile, headline=headline, primary_metric=PRIMARY,
                         higher_is_better=False, rows=rows, tables=tables,
                         details={"lambdas": list(cfg.lambdas), "ppl_by_lambda": sweeps})
