"""metrics/lota_qaf.json: a row per variant (<task>_float, <task>_w<b>_quantized, <task>_w<b>_<method>:
the mean over the recovery seeds, each seed's row in the details), a table per task (bit widths ×
methods, after the merge), headline figures computed from the run (never written by hand), and the
paper's claims (`claims.evaluate`)."""
from __future__ import annotations

from paperline.methods.lota_qaf.claims import evaluate
from paperline.methods.lota_qaf.config import LotaQafConfig
from paperline.metrics import MethodMetrics

METRIC = {"digits": "accuracy", "lm": "perplexity"}
HIGHER_IS_BETTER = {"digits": True, "lm": False}


def degradation(task: str, before: float, after: float) -> float:
    """How much worse `after` is than `before` (positive: worse), in the task's metric."""
    return before - after if HIGHER_IS_BETTER[task] else after - before


def method_rows(rows: dict[str, dict]) -> dict[str, dict]:
    """Each method row gains `merge_loss`: its merge's degradation of the metric (0: lossless)."""
    out = {}
    for variant, row in rows.items():
        task = variant.split("_")[0]
        metric = METRIC[task]
        if f"{metric}_unmerged" in row:
            row = row | {"merge_loss": degradation(task, row[f"{metric}_unmerged"], row[metric])}
        out[variant] = row
    return out


def tables(cfg: LotaQafConfig, rows: dict[str, dict]) -> dict[str, dict]:
    """<task>: a row per bit width: float, quantised, each method merged (and unmerged)."""
    out = {}
    for task in cfg.tasks:
        metric = METRIC[task]
        table = {}
        for bits in cfg.bits:
            prefix = f"{task}_w{bits}"
            quantized = rows[f"{prefix}_quantized"]
            entry = {"float": rows[f"{task}_float"][metric], "quantized": quantized[metric]}
            if f"{metric}_rtn" in quantized:  # a GPTQ run scores RTN beside it
                entry["quantized_rtn"] = quantized[f"{metric}_rtn"]
            for method in cfg.methods:
                r = rows[f"{prefix}_{method}"]
                entry[f"{method}_merged"] = r[metric]
                entry[f"{method}_unmerged"] = r[f"{metric}_unmerged"]
            table[f"w{bits}"] = entry
        out[f"{task}_{metric}"] = table
    return out


def headline(cfg: LotaQafConfig, rows: dict[str, dict]) -> dict:
    """- lota_max_merge_loss, lora_mean_merge_loss_low_bits (b ≤ 3; in each task's metric, averaged
      over the tasks' rows: positive is worse) and lora_max_merge_loss;
    - <task>_lota_recovered_w<b>: the share of the quantisation drop LoTA recovered after merging
      ((quantised − LoTA) / (quantised − float), in the direction of the metric; None without a drop);
    - <task>_memory_ratio_w<b>: bytes of the merged int-b LoTA model over the 16-bit LoRA model;
    - <task>_lota_changed_share_w<b>: the share of quantised weights the merge changed;
    - <task>_gptq_gain_over_rtn_w<b> (GPTQ runs): how much better the GPTQ model scores than RTN's.
    Whether the merge is lossless and whether LoTA beats each baseline are claims, not figures here."""
    out: dict = {}
    lota = [r for v, r in rows.items() if v.endswith("_lota")]
    if lota:
        out["lota_max_merge_loss"] = max(abs(r["merge_loss"]) for r in lota)
    lora = {v: r for v, r in rows.items() if v.endswith("_lora")}
    if lora:
        low = [r["merge_loss"] for v, r in lora.items() if r["bits"] <= 3]
        out["lora_mean_merge_loss_low_bits"] = sum(low) / len(low) if low else None
        out["lora_max_merge_loss"] = max(r["merge_loss"] for r in lora.values())
    for task in cfg.tasks:
        metric = METRIC[task]
        ceiling = rows[f"{task}_float"][metric]
        for bits in cfg.bits:
            prefix = f"{task}_w{bits}"
            quant = rows[f"{prefix}_quantized"][metric]
            if f"{metric}_rtn" in rows[f"{prefix}_quantized"]:
                out[f"{task}_gptq_gain_over_rtn_w{bits}"] = degradation(
                    task, quant, rows[f"{prefix}_quantized"][f"{metric}_rtn"])
            if "lota" in cfg.methods:
                got = rows[f"{prefix}_lota"][metric]
                drop = degradation(task, ceiling, quant)
                out[f"{task}_lota_recovered_w{bits}"] = (degradation(task, got, quant) / drop) if drop > 0 else None
                out[f"{task}_lota_changed_share_w{bits}"] = rows[f"{prefix}_lota"]["changed_share"]
                out[f"{task}_memory_ratio_w{bits}"] = (rows[f"{prefix}_lota"]["model_bytes"]
                                                       / rows[f"{prefix}_lota"]["lora16_bytes"])
    return out


def method_metrics(cfg: LotaQafConfig, rows: dict[str, dict], seed_rows: dict[str, list[dict]],
                   histories: dict[str, list[float]], profile: str) -> MethodMetrics:
    """`rows` (a method's: the mean over seeds) and `seed_rows` (a method's row at each seed, what
    the claims pair by): `run_group`'s, with the float rows."""
    rows = method_rows(rows)
    return MethodMetrics(method="lota_qaf", profile=profile, headline=headline(cfg, rows), rows=rows,
                         claims=evaluate(rows, seed_rows),
                         tables=tables(cfg, rows),
                         details={"histories": histories, "quantizer": cfg.quantizer, "seed_rows": seed_rows,
                                  "metric": {t: METRIC[t] for t in cfg.tasks}})
