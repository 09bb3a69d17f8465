"""The AltLoRA paper's claims, computed from the run's per-seed values.

What the paper claims (in our words):

1. Alternating projected steps on the LoRA factors, with momentum transported between the factors'
   subspaces, bring the low-rank update closer to the full-gradient direction than LoRA-AdamW: on
   an ill-conditioned low-rank target the adapted ΔW = sBA ends closer to Δ (AltLoRA, and AltLoRA+
   with second moments too).
2. AltLoRA's step is invariant to rescaling the factors (A·c, B/c); LoRA-AdamW's is not: its final
   loss moves with c, AltLoRA's does not (spread = max/min of the final loss over c).
3. On LLM fine-tuning AltLoRA reaches a lower held-out loss than LoRA-AdamW at the same memory.
4. (Trivial) adapting does something: the error to Δ is below W₀'s own (no adaptation, ΔW = 0),
   and the adapted LM's held-out loss below the base's.

The claims pair by seed, every optimizer at its seed-0 best lr: linear, each seed its own W₀, Δ,
data and initialisation; LM, each seed its own LoRA initialisation, batches and dropout on one
held-out text (the base's loss one figure at every seed).
"""
from __future__ import annotations

from collections.abc import Mapping

from paperline.claims import Claim, ClaimSpec

NO_ADAPTATION = "no_adaptation"  # the linear problem's W₀ (ΔW = 0); the LM's base before adaptation

LINEAR_SPECS: tuple[ClaimSpec, ...] = (
    ClaimSpec(name="altlora_below_lora_adamw_error", claim="ΔW closer to the ill-conditioned target than LoRA-AdamW's",
              metric="final_error", method="altlora", versus="lora_adamw", direction="lower"),
    ClaimSpec(name="altlora_plus_below_lora_adamw_error",
              claim="AltLoRA+'s ΔW closer to the ill-conditioned target than LoRA-AdamW's",
              metric="final_error", method="altlora_plus", versus="lora_adamw", direction="lower"),
    ClaimSpec(name="altlora_c_spread_below_lora_adamw", claim="invariant to rescaling the factors (A·c, B/c), "
              "unlike LoRA-AdamW", metric="c_spread", method="altlora", versus="lora_adamw", direction="lower"),
    ClaimSpec(name="altlora_below_no_adaptation_error", claim="adapting moves W₀ towards the target",
              metric="final_error", method="altlora", versus=NO_ADAPTATION, direction="lower", trivial=True),
)
LM_SPECS: tuple[ClaimSpec, ...] = (
    ClaimSpec(name="lm_altlora_below_lora_adamw_val_loss", claim="lower held-out loss than LoRA-AdamW in LM fine-tuning",
              metric="lm_val_loss", method="altlora", versus="lora_adamw", direction="lower"),
    ClaimSpec(name="lm_altlora_below_base_val_loss", claim="adapting lowers the base's held-out loss on the new text",
              metric="lm_val_loss", method="altlora", versus=NO_ADAPTATION, direction="lower", trivial=True),
)
SPECS: tuple[ClaimSpec, ...] = LINEAR_SPECS + LM_SPECS

SeedRows = Mapping[int, Mapping[str, Mapping[str, float | None]]]


def _values(seed_rows: SeedRows, variant: str, metric: str) -> dict[int, float | None]:
    return {s: rows[variant].get(metric) for s, rows in seed_rows.items() if variant in rows}


def _claims(specs: tuple[ClaimSpec, ...], seed_rows: SeedRows, ran: set[str]) -> list[Claim]:
    return [spec.paired(_values(seed_rows, spec.method, spec.metric), _values(seed_rows, spec.versus, spec.metric))
            for spec in specs if spec.method in ran and spec.versus in ran]


def evaluate(linear: SeedRows, optimizers: list[str], lm: SeedRows | None = None,
             lm_optimizers: list[str] | None = None) -> list[Claim]:
    """The claims whose variants the run has, from {seed: {variant: {metric: value}}}
    (`summary.seed_rows`'s); a variant that diverged at a seed has no value there."""
    return _claims(LINEAR_SPECS, linear, {*optimizers, NO_ADAPTATION}) + (
        _claims(LM_SPECS, lm, {*lm_optimizers, NO_ADAPTATION}) if lm and lm_optimizers else [])
