"""The comparison of a GeoAda run (a row per control type × variant) and its claims as numbers
computed from the run (spec (e) "Expected": GeoAda's new-task ADE ≈ full fine-tuning's, the original
task unchanged with the adapter off, full fine-tuning forgetting; equivariance at float precision,
the non-equivariant ControlNet's not)."""
from __future__ import annotations

from paperline.methods.geoada.config import GeoAdaConfig
from paperline.metrics import MethodMetrics

PRIMARY = "ade"
METRICS = ("ade", "fde", "min_ade", "min_fde")


def row_name(control: str, variant: str) -> str:
    return f"{control}_{variant}"


def variant_row(result: dict, base_original: dict[str, float]) -> dict:
    """A result (experiment.VariantResult.as_dict()) as a row; the original task's figures are the
    base's where the model on it is the base (frozen; GeoAda and ControlNet with the adapter off)."""
    original = result["original_task"] or base_original
    change = original["ade"] / base_original["ade"] - 1 if base_original["ade"] else None
    return {"control": result["control"], "variant": result["variant"],
            **{k: result["new_task"][k] for k in METRICS},
            **{f"original_{k}": original[k] for k in METRICS},
            "original_ade_change": change,
            "original_is_base": result["original_task"] is None,
            "trainable_params": result["trainable"], "train_seconds": result["train_seconds"],
            "equivariance_error": result["equivariance_error"]}


def summarize(cfg: GeoAdaConfig, results: list[dict], base_original: dict[str, float]) -> dict[str, dict]:
    """Rows in the order controls × variants (the pairs that fit, cfg.pairs), each with `forgets` (its
    original-task ADE up by more than forget_tolerance of the base's)."""
    by_key = {(r["control"], r["variant"]): r for r in results}
    rows = {}
    for control, variant in cfg.pairs:
        row = variant_row(by_key[(control, variant)], base_original)
        row["forgets"] = row["original_ade_change"] is not None and row["original_ade_change"] > cfg.forget_tolerance
        rows[row_name(control, variant)] = row
    return rows


def claims(cfg: GeoAdaConfig, rows: dict[str, dict], base_original: dict[str, float]) -> dict:
    """Per control type c: GeoAda's new-task ADE/FDE and its ratio to every other variant's, its and
    full FT's original-task change, and the claims as booleans — `claim_<c>_geoada_matches_full_ft`,
    `claim_<c>_geoada_no_forgetting`, `claim_<c>_full_ft_forgets` (None where a needed row is
    absent); then over all control types (matches: on every one; full FT forgets: on any one); the
    equivariance errors of GeoAda and of the ControlNet ablation (the largest over control types)."""
    out: dict = {"base_original_ade": base_original["ade"], "base_original_fde": base_original["fde"]}
    matches, keeps, ft_forgets = [], [], []
    for control in cfg.controls:
        geo = rows[row_name(control, "geoada")]
        out[f"{control}_geoada_ade"] = geo[PRIMARY]
        out[f"{control}_geoada_fde"] = geo["fde"]
        out[f"{control}_geoada_original_ade_change"] = geo["original_ade_change"]
        out[f"claim_{control}_geoada_no_forgetting"] = not geo["forgets"]
        keeps.append(not geo["forgets"])
        for other in ("full_ft", "frozen", "controlnet", "partial_k", "mlp_k", "gpf", "gpf_plus", "prompt_template"):
            row = rows.get(row_name(control, other))
            if row and row[PRIMARY]:
                out[f"{control}_geoada_ade_vs_{other}"] = geo[PRIMARY] / row[PRIMARY]
        ft = rows.get(row_name(control, "full_ft"))
        match = forgets = None
        if ft:
            out[f"{control}_full_ft_ade"] = ft[PRIMARY]
            out[f"{control}_full_ft_original_ade_change"] = ft["original_ade_change"]
            match, forgets = geo[PRIMARY] <= (1 + cfg.match_tolerance) * ft[PRIMARY], ft["forgets"]
            matches.append(match)
            ft_forgets.append(forgets)
        out[f"claim_{control}_geoada_matches_full_ft"] = match
        out[f"claim_{control}_full_ft_forgets"] = forgets
    out["claim_geoada_matches_full_ft"] = all(matches) if matches else None
    out["claim_geoada_no_forgetting"] = all(keeps)
    out["claim_full_ft_forgets"] = any(ft_forgets) if ft_forgets else None
    for variant in ("geoada", "controlnet"):
        errors = [rows[row_name(c, variant)]["equivariance_error"] for c in cfg.controls
                  if row_name(c, variant) in rows]
        if errors:
            out[f"{variant}_equivariance_error"] = max(errors)
    out["claim_geoada_equivariant"] = out["geoada_equivariance_error"] < 1e-6
    if "controlnet_equivariance_error" in out:
        out["claim_controlnet_not_equivariant"] = out["controlnet_equivariance_error"] > 1e-3
    out["forgetting_variants"] = ",".join(name for name, r in rows.items() if r["forgets"]) or "none"
    return out


def method_metrics(cfg: GeoAdaConfig, results: list[dict], base: dict, profile: str,
                   data_record: dict | None = None) -> MethodMetrics:
    """metrics/geoada.json: a row per control × variant (no one baseline: rows of two tasks), the
    claims as the headline; the base's pretraining record and the loss curves as details."""
    rows = summarize(cfg, results, base["original_task"])
    return MethodMetrics(
        method="geoada", profile=profile, headline=claims(cfg, rows, base["original_task"]),
        baseline=None, primary_metric=PRIMARY, higher_is_better=False, rows=rows,
        details={"data": data_record or {},
                 "base": {k: base[k] for k in ("original_task", "trainable", "train_seconds", "final_loss")},
                 "loss_curves": {row_name(r["control"], r["variant"]): {"step": r["steps"], "loss": r["loss"]}
                                 for r in results if r["steps"]}})
