"""FVAE-LoRA's claims, computed from the run's per-seed results.

The paper's main claims, in our words (spec (e): a spurious corner patch / token agreeing with the
label in 95% of training, a balanced test set):
1. FVAE-LoRA is more robust to a spurious correlation than LoRA: a higher worst-group accuracy
   (the group where the shortcut misleads), at a similar average accuracy (a figure here, not a
   claim: "similar" has no direction to test).
2. It learns more than a frozen backbone with a new head already gives: above the linear probe,
   the trivial baseline of this setting (the backbone untouched, only the task head trained).
3. Each part of its objective matters: the full method above each ablation (no push of z₁ from the
   origin, no prior separation m = 0, a 10× KL weight).

Each claim is stated for both modalities the run measures: the image task (`image_*`, rows named by
the variant) and the text task (`text_*`, rows `text_<variant>`). A seed fixes the task's draws for
every variant, so the differences are paired by seed.
"""
from __future__ import annotations

from collections.abc import Mapping

from paperline.claims import Claim, ClaimSpec
from paperline.methods.fvae_lora.config import BASELINE, TEXT_PREFIX, VARIANT_SPECS

PRIMARY = "worst_group_accuracy"
MODALITIES = {"image": "", "text": TEXT_PREFIX}  # claim prefix -> row prefix
ABLATIONS = tuple(v for v, (kind, changes) in VARIANT_SPECS.items() if kind == "fvae" and changes)


def _spec(modality: str, versus: str, name: str, claim: str, trivial: bool = False) -> ClaimSpec:
    rows = MODALITIES[modality]
    return ClaimSpec(name=f"{modality}_fvae_lora_above_{name}_worst_group", claim=f"{claim} ({modality})",
                     metric=PRIMARY, method=f"{rows}fvae_lora", versus=f"{rows}{versus}", direction="higher",
                     trivial=trivial)


SPECS: tuple[ClaimSpec, ...] = tuple(
    spec for m in MODALITIES for spec in (
        _spec(m, BASELINE, "lora", "more robust to a spurious correlation than LoRA: higher worst-group accuracy"),
        _spec(m, "linear_probe", "probe", "beats the frozen backbone with a trained head (linear probe) on the "
              "worst group", trivial=True),
        *(_spec(m, a, a, f"the full objective beats its ablation {a} on the worst group") for a in ABLATIONS)))


def evaluate(results: Mapping[str, Mapping[int, dict]], modality: str) -> list[Claim]:
    """The claims of one modality from `results`: variant (without the row prefix) -> seed -> the
    training's output (its "metrics"); a claim whose variants did not run is left out."""
    rows = MODALITIES[modality]
    seed_rows: dict[int, dict[str, dict]] = {}
    for variant, by_seed in results.items():
        for seed, result in by_seed.items():
            seed_rows.setdefault(seed, {})[rows + variant] = result["metrics"]
    ran = {v for r in seed_rows.values() for v in r}
    return [spec.evaluate(seed_rows) for spec in SPECS
            if spec.name.startswith(f"{modality}_") and {spec.method, spec.versus} <= ran]
