"""metrics/qfft.json: one row per model (the base and the four fine-tunes) with accuracy, mean
length and long-CoT rate on all/easy/hard questions, RAK and AES against the base; easy = the base
answers correctly (in at least half its samples)."""
from __future__ import annotations

from paperline.metrics import MethodMetrics

# The paper's comparison is QFFT against SFT on the same long-CoT data (SFT is the method QFFT
# replaces); the short-CoT base is the reference inside RAK and AES, not a competitor. So SFT is
# the baseline and accuracy, which QFFT claims to keep while shortening responses, the primary metric.
BASELINE = "sft"
PRIMARY = "all_accuracy"


def method_metrics(base: dict, variants: dict[str, dict], profile: str) -> MethodMetrics:
    """`base` and each of `variants`: {"samples": the scored responses, "train": the fit's figures}."""
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
    sft, qfft = rows["sft"], rows["qfft"]
    headline = {"questions": int(len(solvable)), "base_accuracy": b["all_accuracy"],
                "qfft_minus_sft_rak": qfft["rak"] - sft["rak"],
                "qfft_over_sft_length": qfft["all_mean_length"] / max(sft["all_mean_length"], 1e-9),
                "qfft_minus_sft_accuracy": qfft["all_accuracy"] - sft["all_accuracy"],
                "noise_iv_sft_accuracy_drop": sft["all_accuracy"] - rows["sft_noise_iv"]["all_accuracy"],
                "noise_iv_qfft_accuracy_drop": qfft["all_accuracy"] - rows["qfft_noise_iv"]["all_accuracy"]}
    return MethodMetrics(method="qfft", profile=profile, headline=headline, baseline=BASELINE,
                         primary_metric=PRIMARY, higher_is_better=True, rows=rows)
