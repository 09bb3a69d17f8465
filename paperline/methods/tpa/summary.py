"""metrics/tpa.json: the comparison of the attention variants trained with one budget at ≈ equal
attention parameters, against MHA (the paper's baseline), each variant's row the mean over its
seeds, with Table 1's cache sizes at the paper's shapes, the decode times and the claims."""
from __future__ import annotations

from paperline.methods.tpa.formulas import PAPER_SHAPES, balanced_heads, cache_elements_per_token
from paperline.metrics import MethodMetrics
from paperline.seeds import mean_over_seeds

BASELINE = "mha"
CACHE = "kv_cache_elements_per_token_per_layer"
NOT_ROW = ("variant", "seed", "history", "eval_history")  # a result's name, seed and curves: not columns
SPREAD = ("val_loss", "val_perplexity", "final_train_loss", "initial_val_loss")  # `<column>_std` beside the mean


def variant_row(run: dict, times: dict[int, dict], ratios: dict[int, dict], mha: dict | None) -> dict:
    """A trained variant's row: what its training task measured (histories left out), its cache
    over MHA's, its decode time per token at each context (and over MHA's)."""
    row = {k: x for k, x in run.items() if k not in NOT_ROW}
    if mha is not None:
        row["kv_cache_vs_mha"] = run[CACHE] / mha[CACHE]
    for c, t in times.items():
        row[f"decode_ms_per_token_ctx{c}"] = t["ms_per_token"]
        if ratios:
            row[f"decode_time_vs_mha_ctx{c}"] = ratios[c]["time_vs_mha"]
    return row


def paper_shapes(variants) -> dict[str, dict]:
    """Table 1 at the paper's T6 shapes: each variant's rebalanced heads and cache per token per layer."""
    table: dict[str, dict] = {}
    for v in variants:
        table[v] = {}
        for size, shape in PAPER_SHAPES.items():
            heads = balanced_heads(v, shape)
            table[v] |= {f"heads_{size}": heads, f"kv_cache_{size}": cache_elements_per_token(v, heads, shape)}
    return table


def seed_rows(results: list[dict]) -> dict[str, dict[int, dict]]:
    """{variant: {seed: that seed's measurements}} from the training tasks' results (histories and
    the result's name and seed left out)."""
    out: dict[str, dict[int, dict]] = {}
    for r in results:
        out.setdefault(r["variant"], {})[r["seed"]] = {k: x for k, x in r.items() if k not in NOT_ROW}
    return out


def mean_curves(results: list[dict]) -> dict[str, dict]:
    """{variant: {"eval_history": {"step", "val_loss"}}}: each variant's validation curve, the mean
    over its seeds at every evaluation step (the seeds share the schedule)."""
    import numpy as np

    curves: dict[str, list] = {}
    for r in results:
        curves.setdefault(r["variant"], []).append(r["eval_history"])
    return {v: {"eval_history": {"step": h[0]["step"],
                                 "val_loss": np.mean([x["val_loss"] for x in h], axis=0).tolist()}}
            for v, h in curves.items()}


def method_metrics(results: list[dict], times: dict, profile: str) -> MethodMetrics:
    """Rows: one per trained variant (the name of its MLflow child run), the mean over its seeds
    (`<column>_std`: the sample std over seeds, and `seeds`); `val_loss_vs_baseline` is its mean
    validation loss over MHA's. Headline: TPA's loss over MHA's, MHA's cache over TPA's here and at
    T6-small (plain figures); the verdicts are the claims (`paperline.methods.tpa.claims`), from
    every seed's own figures."""
    from paperline.methods.tpa import claims
    from paperline.methods.tpa.decode import ratios_vs

    per_seed = seed_rows(results)
    runs = {v: mean_over_seeds(list(seeds.values()), spread=SPREAD.__contains__, keep_shared=True)
            | {"seeds": len(seeds)} for v, seeds in per_seed.items()}
    ratios = ratios_vs(times, BASELINE)
    mha = runs.get(BASELINE)
    rows = {v: variant_row(run, times.get(v, {}), ratios.get(v, {}), mha) for v, run in runs.items()}
    shapes = paper_shapes(runs)
    headline: dict = {}
    if mha is not None and "tpa" in runs:
        headline |= {"tpa_val_loss_vs_mha": runs["tpa"]["val_loss"] / mha["val_loss"],
                     "cache_ratio_mha_over_tpa": mha[CACHE] / runs["tpa"][CACHE],
                     "cache_ratio_mha_over_tpa_paper_small": shapes[BASELINE]["kv_cache_small"]
                     / shapes["tpa"]["kv_cache_small"]}
    return MethodMetrics(method="tpa", profile=profile, headline=headline,
                         baseline=BASELINE if mha is not None else None, primary_metric="val_loss",
                         higher_is_better=False, rows=rows, tables={"paper_shapes": shapes},
                         details={"val_loss_by_seed": {v: {str(s): r["val_loss"] for s, r in seeds.items()}
                                                       for v, seeds in per_seed.items()}},
                         claims=claims.evaluate(per_seed))
