"""HRM-PET's claims (Wang et al., NeurIPS 2025), in our words, and their verdicts from a run.

The paper claims that
1. HRM-PET's final average accuracy A_N is above HiDe-LoRA's (the same LoRA-per-task learner
   with the TII head's initial matching) on class-incremental benchmarks;
2. each component adds to it: direct re-matching (DRM) raises task-matching accuracy and A_N at no
   training cost, confidence-based re-matching (CRM) raises A_N, and the CTIRD training loss
   raises A_N;
and, as every LoRA-per-task method implies, adapting per task beats not adapting at all: HRM-PET's
A_N above the frozen backbone's own replay-aligned head (`frozen_head`, the trivial baseline).

Every claim pairs the two variants by seed, each side's figure the mean over the task sequences
that seed ran (MNIST and Fashion-MNIST at smoke): both variants are evaluated on the same learners
of the same runs, so the pairing removes what the split and the initial weights do to both, and a
claim's `seeds` counts seeds, not (sequence, seed) runs (the sequences of one seed are not
independent draws of the claim).
"""
from __future__ import annotations

from collections.abc import Mapping

from paperline.claims import Claim, ClaimSpec

A_N = "final_accuracy"

SPECS: tuple[ClaimSpec, ...] = (
    ClaimSpec(name="hrm_pet_above_frozen_head", claim="adapting a LoRA per task beats the frozen backbone's head",
              metric=A_N, method="hrm_pet", versus="frozen_head", direction="higher", trivial=True),
    ClaimSpec(name="hrm_pet_above_hide_lora", claim="higher final accuracy A_N than HiDe-LoRA",
              metric=A_N, method="hrm_pet", versus="hide_lora", direction="higher"),
    ClaimSpec(name="drm_raises_matching", claim="DRM raises task-matching accuracy over HiDe-LoRA's",
              metric="matching", method="drm", versus="hide_lora", direction="higher"),
    *(ClaimSpec(name=f"{switch}_above_hide_lora", claim=f"{switch.upper()} alone raises A_N over HiDe-LoRA",
                metric=A_N, method=switch, versus="hide_lora", direction="higher")
      for switch in ("drm", "crm", "ctird")),
)


def evaluate(runs: Mapping[str, Mapping[tuple[str, int], Mapping[str, float]]]) -> list[Claim]:
    """The claims whose variants both ran, from `runs`: variant -> (sequence, seed) -> that run's
    figures; each claim paired by seed on the mean over the sequences both variants ran at it."""
    claims = []
    for spec in SPECS:
        if spec.method not in runs or spec.versus not in runs:
            continue  # a variant left out of cfg.variants: its claims cannot be made
        shared = [run for run in runs[spec.versus] if run in runs[spec.method]]
        by_seed: dict[int, dict[str, dict[str, float]]] = {}
        for seed in sorted({seed for _, seed in shared}):
            at_seed = [run for run in shared if run[1] == seed]
            by_seed[seed] = {v: {spec.metric: sum(runs[v][run][spec.metric] for run in at_seed) / len(at_seed)}
                             for v in (spec.method, spec.versus)}
        claims.append(spec.evaluate(by_seed))
    return claims
