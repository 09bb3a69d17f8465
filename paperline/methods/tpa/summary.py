"""metrics/tpa.json: the comparison of the attention variants trained with one budget at ≈ equal
attention parameters, against MHA (the paper's baseline), with Table 1's cache sizes at the paper's
shapes and the decode times."""
from __future__ import annotations

from paperline.methods.tpa.formulas import PAPER_SHAPES, balanced_heads, cache_elements_per_token
from paperline.metrics import MethodMetrics

BASELINE = "mha"
CACHE = "kv_cache_elements_per_token_per_layer"


def variant_row(run: dict, times: dict[int, dict], ratios: dict[int, dict], mha: dict | None) -> dict:
    """A trained variant's row: what its training task measured (histories left out), its cache
    over MHA's, its decode time per token at each context (and over MHA's)."""
    row = {k: x for k, x in run.items() if k not in ("history", "eval_history")}
    if mha is not None:
        row["kv_cache_vs_mha"] = run[CACHE] / mha[CACHE]
    for c, t in times.items():
        row[f"decode_ms_per_token_ctx{c}"] = t["ms_per_token"]
        if ratios:
            row[f"decode_time_vs_mha_ctx{c}"] = ratios[c]["time_vs_mha"]
    return row


def paper_shapes(variants) -> dict[str, dict]:
    """Table 1 at the paper's T6 shapes: each variant's rebalanced heads and cache per token per layer."""
    table = {}
    for v in variants:
        table[v] = {}
        for size, shape in PAPER_SHAPES.items():
            heads = balanced_heads(v, shape)
            table[v] |= {f"heads_{size}": heads, f"kv_cache_{size}": cache_elements_per_token(v, heads, shape)}
    return table


def method_metrics(runs: dict[str, dict], times: dict, profile: str) -> MethodMetrics:
    """Rows: one per trained variant (the name of its MLflow child run); `val_loss_vs_baseline` is
    its validation loss over MHA's. Headline: the claims — the best variant, TPA's loss over MHA's,
    MHA's cache over TPA's here and at T6-small."""
    from paperline.methods.tpa.decode import ratios_vs

    ratios = ratios_vs(times, BASELINE)
    mha = runs.get(BASELINE)
    rows = {v: variant_row(run, times.get(v, {}), ratios.get(v, {}), mha) for v, run in runs.items()}
    shapes = paper_shapes(runs)
    headline: dict = {"best_val_loss_variant": min(runs, key=lambda v: runs[v]["val_loss"])}
    if mha is not None and "tpa" in runs:
        headline |= {"tpa_val_loss_vs_mha": runs["tpa"]["val_loss"] / mha["val_loss"],
                     "cache_ratio_mha_over_tpa": mha[CACHE] / runs["tpa"][CACHE],
                     "cache_ratio_mha_over_tpa_paper_small": shapes[BASELINE]["kv_cache_small"]
                     / shapes["tpa"]["kv_cache_small"]}
    return MethodMetrics(method="tpa", profile=profile, headline=headline,
                         baseline=BASELINE if mha is not None else None, primary_metric="val_loss",
                         higher_is_better=False, rows=rows, tables={"paper_shapes": shapes})
