"""The comparison of a GeoAda run: a row per control type × variant, each the mean over the
fine-tuning seeds (with the sample std of every figure) of that variant's per-seed rows; the
per-seed rows as a table; the claims (claims.py) from those per-seed rows; plain figures (GeoAda's
ADE over full fine-tuning's and the frozen base's, full fine-tuning's original-task change, the
equivariance errors) as the headline."""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from paperline.methods.geoada import claims as geoada_claims
from paperline.methods.geoada.config import GeoAdaConfig
from paperline.metrics import MethodMetrics
from paperline.seeds import mean_over_seeds
from paperline.sweep import past_edge

PRIMARY = "ade"
METRICS = ("ade", "fde", "min_ade", "min_fde")
SPREAD = (*METRICS, *(f"original_{k}" for k in METRICS), *(f"original_on_{k}" for k in METRICS),
          "original_ade_change", "original_on_ade_change", "equivariance_error")


def row_name(control: str, variant: str) -> str:
    return f"{control}_{variant}"


def variant_row(result: dict, base_original: dict[str, float]) -> dict:
    """A result (experiment.VariantResult.as_dict()) as one seed's row. The original task two ways,
    every variant alike: `original_*` with the variant's additions off (the base's figures at that
    seed where that is the base), `original_on_*` with them on (the "off" figures where no addition
    acts without the control); `*_ade_change` each over the base's ADE at that seed."""
    off = result["original_task"] or base_original
    on = result.get("original_task_on") or off

    def change(figures: dict[str, float]) -> float | None:
        return figures["ade"] / base_original["ade"] - 1 if base_original["ade"] else None

    return {"control": result["control"], "variant": result["variant"],
            **{k: result["new_task"][k] for k in METRICS},
            **{f"original_{k}": off[k] for k in METRICS},
            **{f"original_on_{k}": on[k] for k in METRICS},
            "original_ade_change": change(off), "original_on_ade_change": change(on),
            "original_is_base": result["original_task"] is None,
            "trainable_params": result["trainable"], "train_seconds": result["train_seconds"],
            "equivariance_error": result["equivariance_error"],
            **({"lr": result["lr"]} if result.get("lr") is not None else {}),
            **({"validation_loss": result["validation_loss"]} if "validation_loss" in result else {}),
            **({"zero_init_max": result["zero_init_max"]} if result.get("zero_init_max") is not None else {})}


def seed_rows(cfg: GeoAdaConfig, results: list[dict], base_original: dict[int, dict[str, float]]
              ) -> dict[int, dict[str, dict]]:
    """{seed: {row name: that seed's row}}, rows in the order controls × variants (cfg.pairs)."""
    by_key = {(r["seed"], r["control"], r["variant"]): r for r in results}
    return {seed: {row_name(c, v): variant_row(by_key[(seed, c, v)], base_original[seed]) for c, v in cfg.pairs}
            for seed in cfg.run_seeds()}


def summarize(cfg: GeoAdaConfig, per_seed: dict[int, dict[str, dict]]) -> dict[str, dict]:
    """A row per control × variant: the mean over seeds (`<figure>_std` the sample std), `seeds`."""
    rows = {}
    for control, variant in cfg.pairs:
        name = row_name(control, variant)
        rows[name] = mean_over_seeds([per_seed[s][name] for s in cfg.run_seeds()], spread=lambda k: k in SPREAD,
                                     keep_shared=True) | {"seeds": len(cfg.run_seeds())}
    return rows


def headline(cfg: GeoAdaConfig, rows: dict[str, dict], per_seed: dict[int, dict[str, dict]],
             base_original: dict[str, float]) -> dict:
    """Per control type c, figures only (the verdicts are the claims): GeoAda's new-task ADE/FDE,
    full fine-tuning's and the frozen base's ADE, GeoAda's ADE over each (means over seeds), full
    fine-tuning's original-task ADE change; the largest equivariance error of GeoAda and of the
    ControlNet ablation (over control types and seeds)."""
    out: dict = {"base_original_ade": base_original["ade"], "base_original_fde": base_original["fde"],
                 "seeds": len(cfg.run_seeds())}
    for control in cfg.controls:
        geo = rows[row_name(control, "geoada")]
        out[f"{control}_geoada_ade"] = geo[PRIMARY]
        out[f"{control}_geoada_fde"] = geo["fde"]
        for other in ("full_ft", "frozen"):
            row = rows.get(row_name(control, other))
            if row:
                out[f"{control}_{other}_ade"] = row[PRIMARY]
                out[f"{control}_geoada_ade_vs_{other}"] = geo[PRIMARY] / row[PRIMARY] if row[PRIMARY] else None
        for variant in ("geoada", "full_ft"):
            row = rows.get(row_name(control, variant))
            if row:
                out[f"{control}_{variant}_original_ade_change"] = row["original_ade_change"]
                out[f"{control}_{variant}_original_on_ade_change"] = row["original_on_ade_change"]
    for variant in ("geoada", "controlnet"):
        errors = [r[row_name(c, variant)]["equivariance_error"] for r in per_seed.values() for c in cfg.controls
                  if row_name(c, variant) in r]
        if errors:
            out[f"{variant}_equivariance_error"] = max(errors)
    return out


def mean_loss_curves(results: list[dict]) -> dict[str, dict]:
    """row -> {"step": [...], "loss": mean over seeds, "validation_loss": mean over seeds (where
    there was a validation set)}, for the rows that trained."""
    curves: dict[str, list[dict]] = defaultdict(list)
    for r in results:
        if r["steps"]:
            curves[row_name(r["control"], r["variant"])].append(r)
    out = {}
    for name, rs in curves.items():
        out[name] = {"step": rs[0]["steps"], "loss": np.mean([r["loss"] for r in rs], axis=0).tolist()}
        if all(r.get("validation_curve") for r in rs):
            out[name]["validation_loss"] = np.mean([r["validation_curve"] for r in rs], axis=0).tolist()
    return out


def lr_sweeps(results: list[dict]) -> dict[str, dict]:
    """row -> {"chosen": the rate every seed trained at, "validation_loss": {rate: its validation
    loss}, "edge": "highest" or "lowest" where the chosen rate is still the sweep's edge after its
    extensions (its optimum not bracketed), else None} from the seed that swept the rates."""
    out = {}
    for r in results:
        if r.get("sweep"):
            chosen = float(f"{r['lr']:g}")  # the sweep's keys hold each rate as f"{lr:g}"
            step = past_edge([float(k) for k in r["sweep"]], chosen)
            edge = None if step is None else "highest" if step > chosen else "lowest"
            out[row_name(r["control"], r["variant"])] = {"chosen": r["lr"], "validation_loss": r["sweep"],
                                                         "edge": edge}
    return out


def method_metrics(cfg: GeoAdaConfig, results: list[dict], base: dict, profile: str,
                   data_record: dict | None = None) -> MethodMetrics:
    """metrics/geoada.json: a row per control × variant (no one baseline: rows of two tasks), the
    claims from the per-seed rows, figures as the headline, the per-seed rows as a table; the base's
    pretraining record and the loss curves (means over seeds) as details. `base["original_task"]`:
    seed -> the base's original-task figures at that seed's sampling noise."""
    base_original = {int(s): v for s, v in base["original_task"].items()}
    per_seed = seed_rows(cfg, results, base_original)
    rows = summarize(cfg, per_seed)
    base_mean = mean_over_seeds(list(base_original.values()))
    return MethodMetrics(
        method="geoada", profile=profile, headline=headline(cfg, rows, per_seed, base_mean),
        baseline=None, primary_metric=PRIMARY, higher_is_better=False, rows=rows,
        tables={"seeds": {f"{name} seed{s}": row for s, r in per_seed.items() for name, row in r.items()}},
        claims=geoada_claims.evaluate(per_seed, list(cfg.controls)),
        details={"data": data_record or {},
                 "base": {"original_task": {f"seed{s}": v for s, v in base_original.items()},
                          **{k: base[k] for k in ("trainable", "train_seconds", "final_loss")}},
                 "loss_curves": mean_loss_curves(results), "lr_sweep": lr_sweeps(results)})
