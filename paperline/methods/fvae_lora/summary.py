"""The comparison of an FVAE-LoRA run: a row per variant, the mean over seeds of every figure with
its sample std (`<figure>_std`); the claims (claims.py) from the per-seed results, paired by seed (a
seed fixes the task's patch draws for every variant); plain figures as the headline: FVAE-LoRA's and
LoRA's accuracies and the mean paired gaps (the intervals and verdicts are the claims').

`results` maps variant -> seed -> train.adapt's output; the text modality's variants are keyed
text_<variant>, their rows likewise, their headline figures prefixed text_."""
from __future__ import annotations

import statistics
from typing import Any

from paperline.claims import Claim
from paperline.methods.fvae_lora import claims as fvae_claims
from paperline.methods.fvae_lora.config import BASELINE, TEXT_PREFIX, VARIANT_SPECS, FvaeLoraConfig
from paperline.metrics import MethodMetrics
from paperline.seeds import mean_over_seeds

PRIMARY = "worst_group_accuracy"
FIGURES = ("accuracy", "worst_group_accuracy", "group_y0_a0", "group_y0_a1", "group_y1_a0", "group_y1_a1",
           "train_accuracy")


def row(cfg: FvaeLoraConfig, by_seed: dict[int, dict]) -> dict:
    """Mean and sample std (`<figure>_std`) over seeds of every figure; time and parameters."""
    per_seed = [{k: by_seed[s]["metrics"][k] for k in (*FIGURES, "train_seconds")} for s in cfg.run_seeds()]
    out = mean_over_seeds(per_seed, spread=lambda k: k in FIGURES)
    first = by_seed[cfg.run_seeds()[0]]["metrics"]
    out["trainable_parameters"] = first["trainable_parameters"]
    out["inference_parameters"] = first["inference_parameters"]
    out["seeds"] = len(cfg.run_seeds())
    return out


def paired_gap(cfg: FvaeLoraConfig, results: dict, a: str, b: str, key: str) -> float:
    """The mean over seeds of a − b (paired: the same task per seed)."""
    return float(statistics.fmean(results[a][s]["metrics"][key] - results[b][s]["metrics"][key] for s in cfg.run_seeds()))


def headline(cfg: FvaeLoraConfig, rows: dict, results: dict) -> dict:
    """FVAE-LoRA against LoRA (and the probe), each ablation against FVAE-LoRA, as figures."""
    fv, lo = rows["fvae_lora"], rows[BASELINE]
    out: dict = {"fvae_lora_worst_group": fv[PRIMARY], "lora_worst_group": lo[PRIMARY],
                 "fvae_lora_accuracy": fv["accuracy"], "lora_accuracy": lo["accuracy"],
                 "worst_group_gain_vs_lora": paired_gap(cfg, results, "fvae_lora", BASELINE, PRIMARY),
                 "accuracy_gain_vs_lora": paired_gap(cfg, results, "fvae_lora", BASELINE, "accuracy"),
                 "seeds_fvae_worst_group_ge_lora": sum(results["fvae_lora"][s]["metrics"][PRIMARY]
                                                       >= results[BASELINE][s]["metrics"][PRIMARY] for s in cfg.run_seeds()),
                 "seeds": len(cfg.run_seeds())}
    if "linear_probe" in rows:  # does the adapter find more than the frozen features give a new head?
        out["linear_probe_worst_group"] = rows["linear_probe"][PRIMARY]
        out["worst_group_gain_vs_probe"] = paired_gap(cfg, results, "fvae_lora", "linear_probe", PRIMARY)
    for v in cfg.variants:
        if VARIANT_SPECS[v][0] == "fvae" and v != "fvae_lora":
            out[f"{v}_worst_group_vs_fvae_lora"] = paired_gap(cfg, results, v, "fvae_lora", PRIMARY)
    return out


def text_results(results: dict) -> dict:
    """The text variants' results under their own names (text_lora -> lora)."""
    return {v[len(TEXT_PREFIX):]: r for v, r in results.items() if v.startswith(TEXT_PREFIX)}


def method_metrics(cfg: FvaeLoraConfig, results: dict[str, dict[int, dict]], backbone: dict, source: str,
                   profile: str, text: dict | None = None) -> MethodMetrics:
    """metrics/fvae_lora.json: a row per variant (LoRA the baseline, worst-group accuracy the
    primary metric), the text variants' rows after them (text_<variant>), the claims of both
    modalities, figures as the headline (the text task's prefixed text_), a per-seed table; loss
    curves as details."""
    parts: list[tuple[str, str, FvaeLoraConfig, dict[str, dict[int, dict]]]] = [
        ("image", "", cfg, {v: results[v] for v in cfg.variants})]
    if cfg.text is not None:
        parts.append(("text", TEXT_PREFIX, cfg.text_config(), text_results(results)))
    rows: dict[str, dict] = {}
    figures: dict[str, Any] = {}
    per_seed: dict[str, dict] = {}
    history: dict[str, dict] = {}
    claims: list[Claim] = []
    for modality, prefix, c, res in parts:
        part_rows = {v: row(c, res[v]) for v in c.variants}
        rows |= {prefix + v: r for v, r in part_rows.items()}
        figures |= {prefix + k: x for k, x in headline(c, part_rows, res).items()}
        claims += fvae_claims.evaluate(res, modality)
        per_seed |= {f"{prefix}{v} seed{s}": {k: res[v][s]["metrics"][k] for k in ("accuracy", PRIMARY, "train_accuracy")}
                     for v in c.variants for s in c.run_seeds()}
        history |= {prefix + v: {s: res[v][s]["history"] for s in c.run_seeds()} for v in c.variants}
    details = {"source": source, "backbone": {k: v for k, v in backbone.items() if k != "path"}, "history": history}
    if text is not None:
        details["text"] = text
    return MethodMetrics(
        method="fvae_lora", profile=profile, headline=figures, baseline=BASELINE,
        primary_metric=PRIMARY, higher_is_better=True, rows=rows, tables={"seeds": per_seed}, details=details,
        claims=claims)
