"""Model Shapley's claims (Chu et al., NeurIPS 2025), in our words, and their verdicts from a run.

The paper claims that the closed-form Shapley value of a parameter group, φ = θ⊙g − ½θ⊙(Hθ) with a
block-Fisher H, ranks units (neurons) by their contribution better than the usual importance scores
— magnitude |θ|, the first-order |g·θ| and OBD's ½θ²F — measured here as:
1. the rank correlation (Spearman) of its neuron ranking with permutation-sampled Shapley values of
   the digits MLP's neurons (the ground truth, signed φ; a ranking by |Φ| is scored against it
   too, and where no φ is negative, as in every smoke seed, signed and |φ| rank alike);
2. pruning the least important neurons first keeps more of the digits MLP's test accuracy (the mean
   accuracy over the pruned fractions);
3. pruning the least important neurons of the shared causal LM first costs less validation loss
   (the mean loss over the pruned fractions).
Each is also read against a random ranking (the trivial baseline: a ranking that knows nothing).
The method's row is `model_shapley`: |Φ|, the ranking of both official benchmarks (the signed −Φ is
the variant row `model_shapley_signed`, compared by no claim). Each claim pairs the two rankings
by seed: a seed draws the data split, the models' initial weights, the ground truth's permutations
and the estimators' batches, the same for every ranking.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from paperline.claims import Claim, ClaimSpec

METHOD = "model_shapley"
# the rankings the paper compares against, and the trivial one
VERSUS: tuple[str, ...] = ("magnitude", "grad_weight", "obd", "random")
# (short name, metric, direction, what the paper says) of each measure
MEASURES: tuple[tuple[str, str, str, str], ...] = (
    ("spearman", "spearman_vs_shapley", "higher", "ranks neurons closer to their sampled Shapley values"),
    ("prune_auc", "prune_accuracy_auc", "higher", "pruning by it keeps more digits test accuracy"),
    ("lm_prune_loss", "lm_prune_loss_auc", "lower", "pruning the LM's neurons by it costs less loss"),
)

SPECS: tuple[ClaimSpec, ...] = tuple(
    ClaimSpec(name=f"{METHOD}_{short}_{'above' if direction == 'higher' else 'below'}_{versus}",
              claim=f"{what} than {versus} ranking", metric=metric, method=METHOD, versus=versus,
              direction=direction, trivial=versus == "random")
    for short, metric, direction, what in MEASURES for versus in VERSUS)


def evaluate(seed_rows: Mapping[Any, Mapping[str, Mapping[str, Any]]]) -> list[Claim]:
    """The claims whose rankings both ran, from {seed: {ranking: row}}."""
    ran = {v for rows in seed_rows.values() for v in rows}
    return [spec.evaluate(seed_rows) for spec in SPECS if {spec.method, spec.versus} <= ran]
