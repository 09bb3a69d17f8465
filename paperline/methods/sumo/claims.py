"""The SUMO paper's claims, computed from the run's per-seed values.

What the paper claims (in our words):

1. Orthogonalising the moment inside GaLore's low-rank subspace (exact SVD) trains faster than
   GaLore-AdamW: lower training loss per step at equal steps and memory.
2. The exact SVD matters: it beats Newton–Schulz (5 steps, Muon's) inside the same subspace,
   whose error grows with the moment's condition number (the ablation; the theory check of the
   run measures the NS error itself, a figure, not a seed comparison).
3. In LLM pretraining SUMO reaches a lower validation loss than AdamW, GaLore-AdamW and Muon at
   equal steps (each optimizer at its best lr of an equal-size grid).
4. (Trivial) training with SUMO does something: its held-out loss is below the initial model's,
   scored the same way (the digits test set; the LM's held-out windows).

Values: each optimizer's run at its best lr, one per seed, paired by seed index (every optimizer
starts from the same initial model at a seed); `initial` is that model before training. A claim
whose variants the run did not train (the tiny profile's LM has AdamW and SUMO only) is left out;
one whose optimizer diverged at every seed is `inconclusive` with 0 seeds.
"""
from __future__ import annotations

from collections.abc import Mapping

from paperline.claims import Claim, ClaimSpec

INITIAL = "initial"
LM_BASELINES = {"adamw": "AdamW", "galore_adamw": "GaLore-AdamW", "muon": "Muon"}

DIGITS_SPECS: tuple[ClaimSpec, ...] = (
    ClaimSpec(name="sumo_below_galore_train_loss", claim="lower training loss per step than GaLore-AdamW (digits MLP)",
              metric="mean_train_loss", method="sumo", versus="galore_adamw", direction="lower"),
    ClaimSpec(name="sumo_svd_below_ns_train_loss",
              claim="exact SVD trains faster than Newton-Schulz5 in the same subspace (digits MLP)",
              metric="mean_train_loss", method="sumo", versus="sumo_ns", direction="lower"),
    ClaimSpec(name="sumo_below_initial_test_loss", claim="training with SUMO lowers the held-out loss (digits MLP)",
              metric="test_loss", method="sumo", versus=INITIAL, direction="lower", trivial=True),
)
LM_SPECS: tuple[ClaimSpec, ...] = (
    *(ClaimSpec(name=f"lm_sumo_below_{base}_val_loss", claim=f"lower validation loss than {label} in LM pretraining",
                metric="test_loss", method="sumo", versus=base, direction="lower")
      for base, label in LM_BASELINES.items()),
    ClaimSpec(name="lm_sumo_below_initial_val_loss", claim="pretraining with SUMO lowers the validation loss (causal LM)",
              metric="test_loss", method="sumo", versus=INITIAL, direction="lower", trivial=True),
)
SPECS: tuple[ClaimSpec, ...] = DIGITS_SPECS + LM_SPECS

SeedRows = Mapping[int, Mapping[str, Mapping[str, float]]]


def _values(seed_rows: SeedRows, variant: str, metric: str) -> dict[int, float]:
    return {s: rows[variant][metric] for s, rows in seed_rows.items() if metric in rows.get(variant, {})}


def _claims(specs: tuple[ClaimSpec, ...], seed_rows: SeedRows, trained: list[str]) -> list[Claim]:
    ran = {*trained, INITIAL}
    return [spec.paired(_values(seed_rows, spec.method, spec.metric), _values(seed_rows, spec.versus, spec.metric))
            for spec in specs if spec.method in ran and spec.versus in ran]


def evaluate(digits: SeedRows, digits_optimizers: list[str], lm: SeedRows | None = None,
             lm_optimizers: list[str] | None = None) -> list[Claim]:
    """The claims of each task the run has, from {seed: {variant: {metric: value}}}
    (`summary.seed_rows`'s) and the optimizers it trained."""
    return _claims(DIGITS_SPECS, digits, digits_optimizers) + (
        _claims(LM_SPECS, lm, lm_optimizers) if lm is not None and lm_optimizers else [])
