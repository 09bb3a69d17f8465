"""metrics/memory_decoder.json: one row per (base size, variant) — the base alone, base + kNN-LM and
base + MemDec, the same MemDec for both bases — with the perplexity of each split at the λ chosen
on the domain dev half (the paper tunes λ per domain; λ = 0 is the base alone) and the inference
time per token. The MemDec trains once per seed: its row is the mean over the seeds at one λ, chosen
on the dev half of the seed-mean sweep (the base and kNN-LM are built once, so every seed scores
them alike). No single baseline row: each base size is its own comparison, so the per-size ratios
(MemDec against kNN-LM) are headline figures and the verdicts the claims. The λ sweeps (the mean
over seeds) are details."""
from __future__ import annotations

from collections.abc import Mapping

from paperline.methods.memory_decoder.config import MemoryDecoderConfig
from paperline.methods.memory_decoder.pipeline import BASES, VARIANTS
from paperline.metrics import MethodMetrics
from paperline.seeds import mean_over_seeds

PRIMARY = "domain_ppl"


def mean_sweep(entries: list[dict]) -> dict:
    """{split: {λ: perplexity}}, the mean over seeds' entries (a value every seed shares, the base's
    and kNN-LM's, kept as it is)."""
    return {split: mean_over_seeds([e[split] for e in entries], spread=lambda _: False, keep_shared=True)
            for split in entries[0]}


def seed_rows(entries: Mapping[int, dict], lam: float) -> dict[int, dict]:
    """Each seed's perplexity of every split at λ (the primary metric first)."""
    rows = {}
    for seed, entry in entries.items():
        ppl = {f"{split}_ppl": sweep[lam] for split, sweep in entry.items()}
        rows[seed] = {PRIMARY: ppl.pop(PRIMARY)} | ppl
    return rows


def variant_row(entries: Mapping[int, dict], variant: str, timing: dict) -> tuple[dict, dict[int, dict]]:
    """One evaluated variant of one base size, from its entry at each seed: (the row: the λ chosen
    on the seed-mean domain_dev sweep, each split's mean perplexity over seeds at that λ with its
    sample std, the inference time per token and over the base's, how λ was tuned; each seed's row
    at that λ)."""
    dev = mean_sweep(list(entries.values()))["domain_dev"]
    best = min(dev, key=dev.get)
    per_seed = seed_rows(entries, best)
    mean = mean_over_seeds(list(per_seed.values()), spread=lambda k: k.endswith("_ppl"), keep_shared=True)
    tuning = "none (λ = 0)" if variant == "base" else f"λ grid of {len(dev)}, chosen on domain_dev"
    return {"lambda": best} | mean | {"seeds": len(per_seed), "ms_per_token": timing[f"{variant}_ms_per_token"],
                                      "time_vs_base": 1.0 if variant == "base" else timing[f"{variant}_vs_base"],
                                      "tuning": tuning}, per_seed


def method_metrics(cfg: MemoryDecoderConfig, bases: dict, datastore: dict, memdecs: Mapping[int, dict],
                   evaluation: dict, profile: str) -> MethodMetrics:
    """`evaluation`: {"results": {seed: {"<size>/<variant>": {split: {λ: ppl}}}}, "timing": ...};
    `memdecs`: each seed's MemDec training figures."""
    from paperline.methods.memory_decoder import claims

    results = evaluation["results"]
    rows: dict = {}
    sweeps: dict = {}
    per_seed: dict = {}
    for size in BASES:
        for variant in VARIANTS:
            name = f"{size}/{variant}"
            entries = {seed: by_name[name] for seed, by_name in results.items()}
            rows[name], per_seed[name] = variant_row(entries, variant, evaluation["timing"][size])
            if variant != "base":  # the base alone has λ = 0 only
                sweeps[name] = {split: {str(lam): v for lam, v in sweep.items()}
                                for split, sweep in mean_sweep(list(entries.values())).items()}
    headline: dict = {}
    for size in BASES:
        headline[f"{size}_memdec_over_knn_lm_{PRIMARY}"] = rows[f"{size}/memdec"][PRIMARY] / rows[f"{size}/knn_lm"][PRIMARY]
        headline[f"{size}_knn_lm_over_memdec_time"] = evaluation["timing"][size]["knn_lm_over_memdec"]
    tables = {"bases": {size: {"params": bases[size]["params"],
                               "general_val_perplexity_train_loop": bases[size]["general_val_perplexity"]}
                        for size in BASES},
              "datastore": {"knn_datastore": datastore},
              "memdec_training": {f"memdec/seed{seed}": row for seed, row in memdecs.items()}}
    details = {"lambdas": list(cfg.lambdas), "ppl_by_lambda": sweeps,
               f"{PRIMARY}_by_seed": {name: {str(s): r[PRIMARY] for s, r in seeds.items()}
                                      for name, seeds in per_seed.items()}}
    return MethodMetrics(method="memory_decoder", profile=profile, headline=headline, primary_metric=PRIMARY,
                         higher_is_better=False, rows=rows, tables=tables, details=details,
                         claims=claims.evaluate(per_seed))
