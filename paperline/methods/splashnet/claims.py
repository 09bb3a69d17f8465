"""SplashNet's claims (*SplashNet*, sEMG typing on emg2qwerty), in our words:

1. SplashNet-mini (a quarter of the baseline's parameters, 0.6x its FLOPs) types with a lower CER
   than the emg2qwerty baseline on users it never saw (zero-shot) and after per-user fine-tuning.
2. SplashNet (half the parameters) does the same, by a little more.
3. Rolling time normalization alone lowers the unseen-user CER when users' electrode gains differ
   (the cross-user shift it targets).
4. (the trivial baseline) Both models type something useful: their zero-shot CER is below that of
   a decoder that types nothing (`blank`: CER 100% on any test set, scored by the same CER).

Every claim is paired by training seed (model init, window order, augmentation; the generated data
are the same at every seed), each seed's variant against the baseline trained at that seed.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from paperline.claims import Claim, ClaimSpec

BLANK = "blank"  # the decoder that types nothing (pipeline.train_and_evaluate's `blank_cer`)
STAGES = {"zero_shot_cer": "zero-shot (unseen users)", "finetuned_cer": "after per-user fine-tuning"}
PAPER_MODELS = {"splashnet_mini": "SplashNet-mini", "splashnet": "SplashNet"}

SPECS: tuple[ClaimSpec, ...] = (
    *(ClaimSpec(name=f"{variant}_below_baseline_{metric}", claim=f"{label}: lower CER {stage} than emg2qwerty",
                metric=metric, method=variant, versus="baseline", direction="lower")
      for variant, label in PAPER_MODELS.items() for metric, stage in STAGES.items()),
    ClaimSpec(name="rtn_below_baseline_zero_shot_cer", claim="RTN alone: lower zero-shot CER than emg2qwerty",
              metric="zero_shot_cer", method="rtn", versus="baseline", direction="lower"),
    *(ClaimSpec(name=f"{variant}_below_blank_zero_shot_cer", claim=f"{label}: lower zero-shot CER than typing nothing",
                metric="zero_shot_cer", method=variant, versus=BLANK, direction="lower", trivial=True)
      for variant, label in PAPER_MODELS.items()),
)


def blank_rows(results: list[dict]) -> dict[str, dict[str, float]]:
    """{seed: the blank decoder's row}: its CER on the test sessions, zero-shot and fine-tuned alike
    (doing nothing has nothing to fine-tune), from any variant's result at that seed (they share
    the test sessions)."""
    return {str(r["seed"]): {metric: r["blank_cer"] for metric in STAGES} for r in results if "blank_cer" in r}


def evaluate(per_seed: Mapping[str, Mapping[Any, Mapping[str, Any]]], blank: Mapping[Any, Mapping[str, Any]]
             ) -> list[Claim]:
    """Every claim whose two variants ran, from {variant: {seed: row}} (summary.variant_rows) and
    the blank decoder's {seed: row}."""
    by_variant = {**per_seed, BLANK: blank}

    def values(variant: str, metric: str) -> dict:
        return {seed: row[metric] for seed, row in by_variant.get(variant, {}).items() if metric in row}

    return [spec.paired(values(spec.method, spec.metric), values(spec.versus, spec.metric))
            for spec in SPECS if by_variant.get(spec.method) and by_variant.get(spec.versus)]
