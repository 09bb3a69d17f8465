"""metrics/qfft.json: one row per model (the base and the four fine-tunes) with accuracy, mean
length and long-CoT rate on all/easy/hard questions, RAK and AES against the base; easy = the base
answers correctly (in at least half its samples). With several training seeds every seed is scored
against its own base (its own easy/hard split), a row holds the mean over seeds of each figure and
its spread (`<figure>_std`, the sample standard deviation: paperline.seeds), the table `seeds` each
seed's row, and the headline's comparisons are of the means; the claims (qfft/claims.py) are read
on the seeds' own rows, paired by seed."""
from __future__ import annotations

from paperline.methods.qfft import claims
from paperline.metrics import MethodMetrics
from paperline.seeds import mean_over_seeds

# The paper's comparison is QFFT against SFT on the same long-CoT data (SFT is the method QFFT
# replaces); the short-CoT base is the reference inside RAK and AES, not a competitor. So SFT is
# the baseline and accuracy, which QFFT claims to keep while shortening responses, the primary metric.
BASELINE = "sft"
PRIMARY = "all_accuracy"


def seed_rows(base: dict, variants: dict[str, dict]) -> dict[str, dict]:
    """One seed's rows: `base` and each of `variants` {"samples": the scored responses, "train":
    the fit's figures}, scored against this base."""
    import numpy as np

    from paperline.methods.qfft.metrics import aes, summarize_variant

    solvable = np.mean([s["correct"] for s in base["samples"]], axis=0) >= 0.5
    rows: dict = {}
    for name, result in ({"base": base} | variants).items():
        rows[name] = summarize_variant(result["samples"], solvable) | {f"fit_{k}": v for k, v in result["train"].items()}
    b = rows["base"]
    for row in rows.values():
        score = aes(row["all_mean_length"], row["all_accuracy"], b["all_mean_length"], b["all_accuracy"])
        if score is not None:
            row["aes"] = score
    return rows


def mean_rows(by_seed: dict[int, dict[str, dict]]) -> dict[str, dict]:
    """Per model: the mean over seeds of every figure and its spread `<figure>_std`, the sample std
    (a figure some seed lacks, e.g. hard-question figures where a base solves every question, over
    the seeds that have it; no spread for the question counts and the fit's figures), and `seeds`
    (how many)."""
    first = next(iter(by_seed.values()))
    return {name: mean_over_seeds([rows_[name] for rows_ in by_seed.values()],
                                  spread=lambda k: not k.startswith(("questions_", "fit_"))) | {"seeds": len(by_seed)}
            for name in first}


def method_metrics(by_seed: dict[int, dict], profile: str) -> MethodMetrics:
    """`by_seed`: seed -> {"base": the base's result, "variants": {variant: result}}."""
    per_seed = {seed: seed_rows(r["base"], r["variants"]) for seed, r in by_seed.items()}
    rows = mean_rows(per_seed)
    b, sft, qfft = rows["base"], rows["sft"], rows["qfft"]
    first = next(iter(by_seed.values()))
    headline = {"questions": len(first["base"]["samples"][0]["correct"]), "seeds": len(per_seed),
                "base_accuracy": b["all_accuracy"], "base_accuracy_std": b["all_accuracy_std"],
                "qfft_minus_sft_rak": qfft["rak"] - sft["rak"],
                "qfft_over_sft_length": qfft["all_mean_length"] / max(sft["all_mean_length"], 1e-9),
                "qfft_minus_sft_accuracy": qfft["all_accuracy"] - sft["all_accuracy"],
                "noise_iv_sft_accuracy_drop": sft["all_accuracy"] - rows["sft_noise_iv"]["all_accuracy"],
                "noise_iv_qfft_accuracy_drop": qfft["all_accuracy"] - rows["qfft_noise_iv"]["all_accuracy"]}
    table = {f"{name}_s{seed}": row for seed, rows_ in per_seed.items() for name, row in rows_.items()}
    # the verdicts: paired by seed, each seed against its own base (paperline.methods.qfft.claims)
    return MethodMetrics(method="qfft", profile=profile, headline=headline, baseline=BASELINE,
                         primary_metric=PRIMARY, higher_is_better=True, rows=rows, tables={"seeds": table},
                         claims=claims.evaluate(per_seed))
