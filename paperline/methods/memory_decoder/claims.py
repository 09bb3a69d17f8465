"""The paper's claims (Cao et al., Memory Decoder), as this run measures them, for each base size.

1. Against doing nothing (trivial): plugging the MemDec into a base lowers its domain perplexity
   below the base alone.
2. One MemDec, no retrieval at inference, reaches a lower domain perplexity than kNN-LM over the
   datastore of the domain.
3. It keeps the base's general ability better than kNN-LM: a lower general perplexity at the λ each
   chose on the domain dev half.

Per-seed figures: the MemDec trains once per seed; the bases and the datastore are built once (the
paper plugs one MemDec into given pretrained bases), so the base's and kNN-LM's figures are the same
at every seed and the interval is the spread of the MemDec's training.
"""
from __future__ import annotations

from collections.abc import Mapping

from paperline.claims import Claim, ClaimSpec
from paperline.methods.memory_decoder.pipeline import BASES

METHOD = "memdec"


def _specs(size: str) -> tuple[ClaimSpec, ...]:
    memdec = f"{size}/{METHOD}"
    return (ClaimSpec(name=f"memdec_below_base_domain_ppl_{size}", claim="plugging in the MemDec lowers domain perplexity",
                      metric="domain_ppl", method=memdec, versus=f"{size}/base", direction="lower", trivial=True),
            ClaimSpec(name=f"memdec_below_knn_lm_domain_ppl_{size}",
                      claim="lower domain perplexity than kNN-LM, with no retrieval at inference",
                      metric="domain_ppl", method=memdec, versus=f"{size}/knn_lm", direction="lower"),
            ClaimSpec(name=f"memdec_below_knn_lm_general_ppl_{size}",
                      claim="keeps general ability better than kNN-LM (lower general perplexity)",
                      metric="general_ppl", method=memdec, versus=f"{size}/knn_lm", direction="lower"))


SPECS: tuple[ClaimSpec, ...] = tuple(spec for size in BASES for spec in _specs(size))


def evaluate(per_seed: Mapping[str, Mapping[int, Mapping[str, float]]]) -> list[Claim]:
    """The claims from {"<size>/<variant>": {seed: that seed's row at the variant's λ}}."""
    return [spec.paired({s: row[spec.metric] for s, row in per_seed[spec.method].items()},
                        {s: row[spec.metric] for s, row in per_seed[spec.versus].items()})
            for spec in SPECS if spec.method in per_seed and spec.versus in per_seed]
