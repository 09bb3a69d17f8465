"""The comparison of an FVAE-LoRA run and its claims as numbers the run computed (spec (e)
Expected: FVAE-LoRA ≥ LoRA on worst-group accuracy with a similar average accuracy; the gap may
be small, so every figure carries a t-interval over seeds, and the differences are paired by
seed: a seed fixes the task's patch draws for every variant).

`results` maps variant -> seed -> train.adapt's output; the text modality's variants are keyed
text_<variant>, their rows likewise, their claims prefixed text_ in the headline."""
from __future__ import annotations

import math
import statistics

from paperline.methods.fvae_lora.config import BASELINE, TEXT_PREFIX, VARIANT_SPECS, FvaeLoraConfig
from paperline.metrics import MethodMetrics

PRIMARY = "worst_group_accuracy"
FIGURES = ("accuracy", "worst_group_accuracy", "group_y0_a0", "group_y0_a1", "group_y1_a0", "group_y1_a1",
           "train_accuracy")
# "Similar average accuracy": within this many points of LoRA's (or a paired interval covering 0)
SIMILAR_ACCURACY = 0.02


def t_interval(values: list[float], confidence: float) -> tuple[float, float]:
    """(mean, half-width of the two-sided Student-t interval); half-width 0 for one value."""
    mean = float(statistics.fmean(values))
    if len(values) < 2:
        return mean, 0.0
    from scipy.stats import t

    sem = statistics.stdev(values) / math.sqrt(len(values))
    return mean, float(t.ppf(0.5 + confidence / 2, len(values) - 1) * sem)


def row(cfg: FvaeLoraConfig, by_seed: dict[int, dict]) -> dict:
    """Mean and CI half-width (`<figure>_ci`) over seeds of every figure; time and parameters."""
    out: dict = {}
    for k in FIGURES:
        mean, half = t_interval([by_seed[s]["metrics"][k] for s in cfg.seeds], cfg.confidence)
        out[k], out[f"{k}_ci"] = mean, half
    first = by_seed[cfg.seeds[0]]["metrics"]
    out["train_seconds"] = float(statistics.fmean(by_seed[s]["metrics"]["train_seconds"] for s in cfg.seeds))
    out["trainable_parameters"] = first["trainable_parameters"]
    out["inference_parameters"] = first["inference_parameters"]
    out["seeds"] = len(cfg.seeds)
    return out


def paired(cfg: FvaeLoraConfig, results: dict, a: str, b: str, key: str) -> tuple[float, float]:
    """Mean and CI half-width of a − b over seeds (paired: the same task per seed)."""
    return t_interval([results[a][s]["metrics"][key] - results[b][s]["metrics"][key] for s in cfg.seeds],
                      cfg.confidence)


def claims(cfg: FvaeLoraConfig, rows: dict, results: dict) -> dict:
    """FVAE-LoRA against LoRA (and the probe), each ablation against FVAE-LoRA, as numbers, and
    the spec's expectation as booleans."""
    fv, lo = rows["fvae_lora"], rows[BASELINE]
    wg, wg_ci = paired(cfg, results, "fvae_lora", BASELINE, PRIMARY)
    acc, acc_ci = paired(cfg, results, "fvae_lora", BASELINE, "accuracy")
    out: dict = {"fvae_lora_worst_group": fv[PRIMARY], "lora_worst_group": lo[PRIMARY],
                 "fvae_lora_accuracy": fv["accuracy"], "lora_accuracy": lo["accuracy"],
                 "worst_group_gain_vs_lora": wg, "worst_group_gain_vs_lora_ci": wg_ci,
                 "accuracy_gain_vs_lora": acc, "accuracy_gain_vs_lora_ci": acc_ci,
                 "seeds_fvae_worst_group_ge_lora": sum(results["fvae_lora"][s]["metrics"][PRIMARY]
                                                       >= results[BASELINE][s]["metrics"][PRIMARY] for s in cfg.seeds),
                 "seeds": len(cfg.seeds)}
    if "linear_probe" in rows:  # does the adapter find more than the frozen features give a new head?
        out["linear_probe_worst_group"] = rows["linear_probe"][PRIMARY]
        d, d_ci = paired(cfg, results, "fvae_lora", "linear_probe", PRIMARY)
        out["worst_group_gain_vs_probe"], out["worst_group_gain_vs_probe_ci"] = d, d_ci
    for v in cfg.variants:
        if VARIANT_SPECS[v][0] == "fvae" and v != "fvae_lora":
            d, d_ci = paired(cfg, results, v, "fvae_lora", PRIMARY)
            out[f"{v}_worst_group_vs_fvae_lora"], out[f"{v}_worst_group_vs_fvae_lora_ci"] = d, d_ci
    out["claim_fvae_worst_group_ge_lora"] = wg >= 0
    out["claim_fvae_worst_group_gt_lora_significant"] = wg - wg_ci > 0
    out["claim_similar_accuracy"] = abs(acc) <= SIMILAR_ACCURACY or abs(acc) <= acc_ci
    return out


def text_results(results: dict) -> dict:
    """The text variants' results under their own names (text_lora -> lora)."""
    return {v[len(TEXT_PREFIX):]: r for v, r in results.items() if v.startswith(TEXT_PREFIX)}


def method_metrics(cfg: FvaeLoraConfig, results: dict[str, dict[int, dict]], backbone: dict, source: str,
                   profile: str, text: dict | None = None) -> MethodMetrics:
    """metrics/fvae_lora.json: a row per variant (LoRA the baseline, worst-group accuracy the
    primary metric), the text variants' rows after them (text_<variant>), the claims as the
    headline (the text task's prefixed text_), a per-seed table; loss curves as details."""
    parts = [("", cfg, {v: results[v] for v in cfg.variants})]
    if cfg.text is not None:
        parts.append((TEXT_PREFIX, cfg.text_config(), text_results(results)))
    rows, headline, per_seed, history = {}, {}, {}, {}
    for prefix, c, res in parts:
        part_rows = {v: row(c, res[v]) for v in c.variants}
        rows |= {prefix + v: r for v, r in part_rows.items()}
        headline |= {prefix + k: x for k, x in claims(c, part_rows, res).items()}
        per_seed |= {f"{prefix}{v} seed{s}": {k: res[v][s]["metrics"][k] for k in ("accuracy", PRIMARY, "train_accuracy")}
                     for v in c.variants for s in c.seeds}
        history |= {prefix + v: {s: res[v][s]["history"] for s in c.seeds} for v in c.variants}
    details = {"source": source, "backbone": {k: v for k, v in backbone.items() if k != "path"}, "history": history}
    if text is not None:
        details["text"] = text
    return MethodMetrics(
        method="fvae_lora", profile=profile, headline=headline, baseline=BASELINE,
        primary_metric=PRIMARY, higher_is_better=True, rows=rows, tables={"seeds": per_seed}, details=details)
