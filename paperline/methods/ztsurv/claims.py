"""The claims of Tang, Shao, Zhang, *ZTSurv* (zero-shot TME segmentation, a heterogeneous cell
graph and a typed GNN with the Cox loss, from 50x slides), in our words, evaluated on this run's
per-seed rows (a seed: its own stratified folds and model inits on the same prepared slides; the
value per seed is the c-index averaged over its test folds):

- ZTSurv's risk ranks patients: its c-index is above a random risk's (the trivial baseline: a
  seeded random score per slide, scored the same way, 0.5 in expectation);
- the graph beats pooling the same cells: above mean pooling and above attention MIL;
- the cell types matter: above the same graph network without node types (a GCN);
- spatial structure beats composition: above a Cox model on the slide's area fractions.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from paperline.claims import Claim, ClaimSpec

METHOD = "ztsurv"
RANDOM = "random_risk"
METRIC = "c_index_mean"  # per seed: the mean over its test folds

SPECS: tuple[ClaimSpec, ...] = (
    ClaimSpec(name="ztsurv_above_random_risk", claim="ZTSurv's risk ranks patients better than chance",
              metric=METRIC, method=METHOD, versus=RANDOM, direction="higher", trivial=True),
    *(ClaimSpec(name=f"ztsurv_above_{b}", claim=claim, metric=METRIC, method=METHOD, versus=b, direction="higher")
      for b, claim in (("mean_pool", "the typed graph beats mean pooling of the same cells"),
                       ("abmil", "the typed graph beats attention MIL on the same cells"),
                       ("gcn", "node types matter: beats the same graph without types (GCN)"),
                       ("composition_cox", "spatial structure beats a Cox model on area fractions"))),
)


def evaluate(seed_rows: Mapping[Any, Mapping[str, Mapping[str, Any]]]) -> list[Claim]:
    """Every claim whose two methods ran, from {seed: {method: row}}."""
    ran = {m for rows in seed_rows.values() for m in rows}
    return [spec.evaluate(seed_rows) for spec in SPECS if spec.method in ran and spec.versus in ran]
