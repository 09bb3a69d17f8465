"""QFFT's claims (Liu et al., *QFFT, Question-Free Fine-Tuning for Adaptive Reasoning*), in our words:

1. QFFT keeps SFT's accuracy: fine-tuning on the long-CoT responses alone (no question) answers
   as many questions as SFT on [question; response] does (the paper: on par, not above; the
   engine states no margin, so "on par" reads `inconclusive`, a clear loss `reversed`).
2. QFFT's responses are shorter than SFT's, overall and on the easy questions (those its base
   answers with short CoT): it thinks long only where it needs to.
3. QFFT thinks adaptively: its Short/Long-CoT choice follows whether its base can solve the
   question (RAK, Cohen's kappa) better than SFT's, which thinks long everywhere.
4. QFFT is robust to noisy data: under noise level IV (each question with another's response) it
   keeps more accuracy than SFT under the same noise.
5. (the trivial baseline) Long-CoT fine-tuning is worth doing: QFFT answers more questions than
   the short-CoT base it starts from, scored the same way.

Every claim is paired by training seed: each seed trains its own base and fine-tunes, and is scored
against its own base (summary.seed_rows).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from paperline.claims import Claim, ClaimSpec

SPECS: tuple[ClaimSpec, ...] = (
    ClaimSpec(name="qfft_accuracy_on_par_with_sft", claim="accuracy on par with SFT (reversed: clearly below)",
              metric="all_accuracy", method="qfft", versus="sft", direction="higher"),
    ClaimSpec(name="qfft_shorter_than_sft", claim="shorter responses than SFT",
              metric="all_mean_length", method="qfft", versus="sft", direction="lower"),
    ClaimSpec(name="qfft_shorter_than_sft_on_easy", claim="shorter responses than SFT on easy questions",
              metric="easy_mean_length", method="qfft", versus="sft", direction="lower"),
    ClaimSpec(name="qfft_rak_above_sft", claim="adaptive thinking: RAK above SFT's",
              metric="rak", method="qfft", versus="sft", direction="higher"),
    ClaimSpec(name="qfft_noise_iv_accuracy_above_sft_noise_iv", claim="more robust than SFT to noise level IV",
              metric="all_accuracy", method="qfft_noise_iv", versus="sft_noise_iv", direction="higher"),
    ClaimSpec(name="qfft_accuracy_above_base", claim="more accurate than the short-CoT base it starts from",
              metric="all_accuracy", method="qfft", versus="base", direction="higher", trivial=True),
)


def _values(per_seed: Mapping[Any, Mapping[str, Mapping[str, Any]]], model: str, metric: str) -> dict:
    return {seed: rows[model][metric] for seed, rows in per_seed.items() if metric in rows.get(model, {})}


def evaluate(per_seed: Mapping[Any, Mapping[str, Mapping[str, Any]]]) -> list[Claim]:
    """Every claim whose two models ran, from {seed: {model: row}} (summary.seed_rows per seed). A
    seed without the figure drops out (easy-question figures where its base solved nothing): the
    claim counts the seeds it has, none at all is inconclusive."""
    ran = {name for rows in per_seed.values() for name in rows}
    return [spec.paired(_values(per_seed, spec.method, spec.metric), _values(per_seed, spec.versus, spec.metric))
            for spec in SPECS if {spec.method, spec.versus} <= ran]
