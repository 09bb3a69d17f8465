"""CodeMerge's claims (test-time model merging by fingerprints and ridge leverage scores), in our
words, as spec (e) reads them at small scale, and their verdicts from a run:

1. adapting with CodeMerge beats not adapting (the source model: the trivial baseline; the paper's
   gains are over the source detector);
2. its online accuracy is at least that of the self-training TTA baselines: TENT (entropy),
   pseudo-labelling (PL) and a mean teacher (EMA);
3. it does not collapse on a long stream: its accuracy over the stream's last window stays above
   that of self-training on its own labels (PL), which does;
4. it matches the MOS-like merge (a forward pass of every stored checkpoint) in accuracy at a
   fraction of its merge cost: online accuracy at least MOS-like's, merge seconds below.

Each claim pairs the two variants by seed: both run the same seed's stream.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from paperline.claims import Claim, ClaimSpec

ONLINE = "online_accuracy"

SPECS: tuple[ClaimSpec, ...] = (
    ClaimSpec(name="codemerge_above_source", claim="test-time merging beats no adaptation", metric=ONLINE,
              method="codemerge", versus="source", direction="higher", trivial=True),
    *(ClaimSpec(name=f"codemerge_above_{b}", claim=f"online accuracy at least {label}'s", metric=ONLINE,
                method="codemerge", versus=b, direction="higher")
      for b, label in (("tent", "TENT"), ("pl", "pseudo-labelling"), ("ema", "an EMA teacher"),
                       ("mos", "the MOS-like merge"))),
    ClaimSpec(name="codemerge_tail_above_pl", claim="no collapse on a long stream, where self-training does",
              metric="tail_accuracy", method="codemerge", versus="pl", direction="higher"),
    ClaimSpec(name="codemerge_merges_faster_than_mos", claim="a fraction of MOS-like's merge cost",
              metric="merge_seconds", method="codemerge", versus="mos", direction="lower"),
)


def evaluate(seed_rows: Mapping[Any, Mapping[str, Mapping[str, Any]]]) -> list[Claim]:
    """The claims whose variants both ran, from {seed: {variant: row}}."""
    ran = {v for rows in seed_rows.values() for v in rows}
    return [spec.evaluate(seed_rows) for spec in SPECS if {spec.method, spec.versus} <= ran]
