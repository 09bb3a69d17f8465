"""The paper's claims (Zhang et al., Tensor Product Attention / T6), as this run measures them.

1. TPA caches only its factors: a token costs (R_K + R_V)(h + d_h) elements per layer, so its KV
   cache over MHA's is 2·h_MHA·d_h / ((R_K + R_V)(h_TPA + d_h)) (`exact`: the caches the trained
   models hold, measured, against Table 1's closed forms: every variant's, and TPA's ratio to MHA).
2. At the same training budget and ≈ the same attention parameters, TPA reaches a lower
   validation loss than MHA, MQA, GQA and MLA (paired by seed: the same seed gives every variant
   the same batches and evaluation windows).
3. Against doing nothing (trivial): training lowers TPA's validation loss below that of the same
   model at its initialisation, scored on the same windows.
"""
from __future__ import annotations

from collections.abc import Mapping

from paperline.claims import Claim, ClaimSpec

METHOD = "tpa"
CACHE, FORMULA = "kv_cache_elements_per_token_per_layer", "kv_cache_formula"
BASELINES = ("mha", "mqa", "gqa", "mla")

BELOW = {v: ClaimSpec(name=f"tpa_below_{v}_val_loss", claim=f"lower validation loss than {v.upper()} at equal budget",
                      metric="val_loss", method=METHOD, versus=v, direction="lower") for v in BASELINES}
BELOW_INITIAL = ClaimSpec(name="tpa_below_initial_val_loss", claim="training lowers the validation loss",
                          metric="val_loss", method=METHOD, versus="initial", direction="lower", trivial=True)
CACHE_TABLE1 = ClaimSpec(name="kv_cache_matches_table1", claim="each variant caches Table 1's elements per token",
                         metric="kv_cache_minus_formula_max_abs", method="all",
                         versus="table1")
CACHE_RATIO = ClaimSpec(name="tpa_cache_ratio_vs_mha_matches_formula",
                        claim="TPA's cache is MHA's times (R_K+R_V)(h+d_h)/(2h·d_h)",
                        metric="kv_cache_ratio_mha_over_tpa", method=METHOD, versus="mha")
SPECS: tuple[ClaimSpec, ...] = (*BELOW.values(), BELOW_INITIAL, CACHE_TABLE1, CACHE_RATIO)

RATIO_TOLERANCE = 1e-12  # a ratio of two integers against the same ratio of two integer formulas


def _values(per_seed: Mapping[str, Mapping[int, Mapping]], variant: str, column: str) -> dict[int, float]:
    return {s: row[column] for s, row in per_seed.get(variant, {}).items()}


def evaluate(per_seed: Mapping[str, Mapping[int, Mapping]]) -> list[Claim]:
    """The claims from {variant: {seed: that seed's row}} (rows as the training tasks return them:
    val_loss, initial_val_loss, the measured cache and its formula)."""
    claims = []
    if METHOD in per_seed:
        tpa = _values(per_seed, METHOD, "val_loss")
        claims += [spec.paired(tpa, _values(per_seed, v, "val_loss")) for v, spec in BELOW.items() if v in per_seed]
        claims.append(BELOW_INITIAL.paired(tpa, _values(per_seed, METHOD, "initial_val_loss")))
    rows = [row for seeds in per_seed.values() for row in seeds.values()]
    claims.append(CACHE_TABLE1.exact(float(max(abs(r[CACHE] - r[FORMULA]) for r in rows)), 0.0, 0.0))
    if METHOD in per_seed and "mha" in per_seed:
        mha_row, tpa_row = next(iter(per_seed["mha"].values())), next(iter(per_seed[METHOD].values()))
        claims.append(CACHE_RATIO.exact(mha_row[CACHE] / tpa_row[CACHE], mha_row[FORMULA] / tpa_row[FORMULA],
                                        RATIO_TOLERANCE))
    return claims
