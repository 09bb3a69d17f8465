"""The LoTA-QAF paper's claims, computed from the run.

What the paper claims (in our words):

1. LoTA's ternary adapter merges into the int-b weights losslessly: the merged quantised model
   gives bit for bit the outputs of the quantised model with the adapter beside it (an identity,
   checked on a probe batch of every (task, bit width) with tolerance 0), and its codes stay on the
   int-b grid.
2. Quantisation-aware fine-tuning with LoTA recovers part of the quantisation drop: the merged LoTA
   model scores better than the quantised model it started from (the trivial baseline: quantising
   and doing nothing).
3. After merging, LoTA beats 16-bit LoRA (whose merge re-quantises and loses what it learnt at low
   bit widths) and is competitive with QA-LoRA (merged into the zero points).

Per (task, bit width), in the task's metric (digits: test accuracy, higher; the LM: held-out
perplexity, lower), each variant scored after its merge, paired by recovery seed (each seed its own
adapter initialisation and batches, from the one quantised model: the quantised model's score is
one figure at every seed). The exact claims hold over every seed's merges.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from paperline.claims import Claim, ClaimSpec
from paperline.methods.lota_qaf.quant import BIT_WIDTHS

TASKS = {"digits": ("accuracy", "higher"), "lm": ("perplexity", "lower")}
VERSUS = {"quantized": "the quantised model without adaptation", "lora": "16-bit LoRA merged by re-quantising",
          "qalora": "QA-LoRA merged into the zero points"}

EXACT_SPECS: tuple[ClaimSpec, ...] = (
    ClaimSpec(name="lota_merge_bit_identical", claim="the ternary adapter merges losslessly (bit-identical outputs)",
              metric="merges_not_bit_identical", method="lota", versus="", direction="lower"),
    ClaimSpec(name="lota_codes_on_grid", claim="the merged codes stay on the int-b grid",
              metric="merges_off_grid", method="lota", versus="", direction="lower"),
)
RECOVERY_SPECS: tuple[ClaimSpec, ...] = tuple(
    ClaimSpec(name=f"{task}_w{bits}_lota_beats_{versus}", claim=f"merged LoTA scores better than {what} ({task}, int{bits})",
              metric=metric, method=f"{task}_w{bits}_lota", versus=f"{task}_w{bits}_{versus}", direction=direction,
              trivial=versus == "quantized")
    for task, (metric, direction) in TASKS.items() for bits in BIT_WIDTHS for versus, what in VERSUS.items())
SPECS: tuple[ClaimSpec, ...] = EXACT_SPECS + RECOVERY_SPECS

def evaluate(rows: Mapping[str, Mapping], seed_rows: Mapping[str, Sequence[Mapping]]) -> list[Claim]:
    """The exact claims over every LoTA merge (every seed's), and each recovery claim whose two
    variants the run has (`rows`: the metrics rows, <task>_w<b>_<variant>; `seed_rows`: a method
    variant's row at each seed, `run_group`'s)."""
    lota = [row for variant, per_seed in seed_rows.items() if variant.endswith("_lota") for row in per_seed]
    claims = []
    if lota:
        lossless, grid = EXACT_SPECS
        claims += [lossless.exact(sum(not row["bit_identical"] for row in lota), target=0, tolerance=0),
                   grid.exact(sum(not row["codes_on_grid"] for row in lota), target=0, tolerance=0)]

    def values(variant: str, metric: str, seeds: int) -> dict[int, float]:
        if variant in seed_rows:
            return {s: row[metric] for s, row in enumerate(seed_rows[variant])}
        return dict.fromkeys(range(seeds), rows[variant][metric])  # no seed of its own (the quantised model)

    return claims + [spec.paired(*(values(v, spec.metric, len(seed_rows[spec.method])) for v in (spec.method, spec.versus)))
                     for spec in RECOVERY_SPECS if spec.method in seed_rows and spec.versus in rows]
