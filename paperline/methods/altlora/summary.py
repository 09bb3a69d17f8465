"""The AltLoRA comparison (metrics/altlora.json): a row per optimizer, its claims computed here.

Linear experiment, per optimizer, at the first rank of `linear.ranks` (r = rank(Δ) by default):
the best lr of the c = 1 sweep (lowest final held-out loss, diverged runs excluded), its final
loss and ‖sBA − Δ‖_F, the same at every c of the rescaling, and the spread across c (max/min of the
final loss: 1 is invariant). Other ranks: final error columns `final_error_r<r>`. State floats
against LoRA-AdamW's and full fine-tuning's. LM adaptation (when run): the best lr's held-out loss
on the target text and on the base's own held-out Shakespeare."""
from __future__ import annotations

from typing import Any

from paperline.methods.altlora.config import BASELINE, AltLoRAConfig
from paperline.metrics import MethodMetrics

PRIMARY_METRIC = "final_error"


def _label(c: float) -> str:
    return f"{c:g}"


def linear_rows(cfg: AltLoRAConfig, runs: list[dict]) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    r0 = cfg.linear.ranks[0]
    for name in cfg.optimizers:
        mine = [r for r in runs if r["optimizer"] == name]
        row: dict[str, Any] = {PRIMARY_METRIC: None}
        for rank in cfg.linear.ranks:
            best = next((r for r in mine if r["rank"] == rank and r["role"] in ("best",)), None)
            if name == "full_ft":  # no factors: its best sweep run at c = 1 stands for every c
                sweep = [r for r in mine if r["rank"] == rank and not r["diverged"]]
                best = min(sweep, key=lambda r: r["final_loss"]) if sweep else None
            if rank == r0:
                row["best_lr"] = best["lr"] if best else None
                grid = cfg.linear.lr_grid[name]
                row["lr_at_grid_edge"] = best is not None and len(grid) > 1 and best["lr"] in (min(grid), max(grid))
                row[PRIMARY_METRIC] = best["final_error"] if best else None
                row["final_loss"] = best["final_loss"] if best else None
                row["relative_error"] = best["relative_error"] if best else None
                by_c = {}
                for c in cfg.linear.scales:
                    run = best if (c == 1.0 or name == "full_ft") else next(
                        (r for r in mine if r["rank"] == rank and r["role"] == "rescaled" and r["c"] == c), None)
                    by_c[c] = run
                    row[f"final_loss_c{_label(c)}"] = run["final_loss"] if run and not run["diverged"] else None
                    row[f"final_error_c{_label(c)}"] = run["final_error"] if run and not run["diverged"] else None
                losses = [row[f"final_loss_c{_label(c)}"] for c in cfg.linear.scales]
                row["c_spread"] = (max(losses) / min(losses)) if all(v is not None for v in losses) else None
                errors = [row[f"final_error_c{_label(c)}"] for c in cfg.linear.scales]
                row["error_c_spread"] = (max(errors) / min(errors)) if all(v is not None for v in errors) else None
                row["diverged_runs"] = sum(r["diverged"] for r in mine)
                any_run = mine[0]
                row["state_floats"] = any_run["state_floats"] if not any_run["diverged"] else any_run["state_floats_formula"]
                row["state_floats_formula"] = any_run["state_floats_formula"]
            else:
                row[f"final_error_r{rank}"] = best["final_error"] if best else None
        rows[name] = row
    base_floats = rows[BASELINE]["state_floats_formula"]
    full = rows.get("full_ft", {}).get("state_floats_formula") or 2 * cfg.linear.dim ** 2
    for row in rows.values():
        row[f"state_floats_vs_{BASELINE}"] = row["state_floats_formula"] / base_floats
        row["state_floats_vs_full_ft"] = row["state_floats_formula"] / full
    return rows


def lm_rows(cfg: AltLoRAConfig, runs: list[dict]) -> dict[str, dict[str, Any]]:
    """{optimizer: {lm_best_lr, lm_val_loss, lm_source_val_loss, ...}} at the best lr (lowest
    held-out target loss)."""
    out: dict[str, dict[str, Any]] = {}
    for name in cfg.lm_optimizers:
        mine = [r for r in runs if r["optimizer"] == name and not r["diverged"]]
        best = min(mine, key=lambda r: r["val_loss"]) if mine else None
        grid = cfg.lm.lr_grid[name]
        out[name] = {"lm_best_lr": best["lr"] if best else None,
                     "lm_val_loss": best["val_loss"] if best else None,
                     "lm_source_val_loss": best["source_val_loss"] if best else None,
                     "lm_lr_at_grid_edge": best is not None and len(grid) > 1 and best["lr"] in (min(grid), max(grid)),
                     "lm_state_floats": best["state_floats"] if best else None,
                     "lm_trainable_params": best["trainable_params"] if best else None}
    return out


def summarize(cfg: AltLoRAConfig, linear_runs: list[dict], lm_runs: list[dict] | None,
              timing: dict[str, dict[str, float]] | None) -> dict[str, dict[str, Any]]:
    rows = linear_rows(cfg, linear_runs)
    if lm_runs:
        for name, extra in lm_rows(cfg, lm_runs).items():
            rows[name] |= extra
    if timing:
        for name, t in timing.items():
            if name in rows:
                rows[name] |= {"step_ms": t["step_ms"], f"step_time_vs_{BASELINE}": t[f"step_time_vs_{BASELINE}"],
                               f"timing_state_floats_vs_{BASELINE}": t[f"state_floats_vs_{BASELINE}"]}
    return rows


def headline(rows: dict[str, dict[str, Any]], lm_base: dict | None = None) -> dict[str, Any]:
    def ratio(a: str, b: str, key: str):
        if a in rows and b in rows and rows[a].get(key) is not None and rows[b].get(key):
            return rows[a][key] / rows[b][key]
        return None

    out: dict[str, Any] = {
        "altlora_over_lora_adamw_final_error": ratio("altlora", BASELINE, PRIMARY_METRIC),
        "altlora_plus_over_lora_adamw_final_error": ratio("altlora_plus", BASELINE, PRIMARY_METRIC),
        "altlora_c_spread": rows.get("altlora", {}).get("c_spread"),
        "lora_adamw_c_spread": rows[BASELINE].get("c_spread"),
        "altlora_error_c_spread": rows.get("altlora", {}).get("error_c_spread"),
        "lora_adamw_error_c_spread": rows[BASELINE].get("error_c_spread"),
        "altlora_state_floats_vs_lora_adamw": rows.get("altlora", {}).get(f"state_floats_vs_{BASELINE}"),
        "lora_pro_state_floats_vs_lora_adamw": rows.get("lora_pro", {}).get(f"state_floats_vs_{BASELINE}"),
    }
    a, b = out["altlora_over_lora_adamw_final_error"], out
    out["claim_altlora_lower_error_than_lora_adamw"] = a is not None and a < 1
    out["claim_altlora_invariant_to_rescaling"] = (b["altlora_c_spread"] is not None and b["lora_adamw_c_spread"] is not None
                                                  and b["altlora_c_spread"] < b["lora_adamw_c_spread"])
    if any(row.get("lm_val_loss") is not None for row in rows.values()):
        out["altlora_over_lora_adamw_lm_val_loss"] = ratio("altlora", BASELINE, "lm_val_loss")
        out["altlora_lm_val_loss"] = rows.get("altlora", {}).get("lm_val_loss")
        out["lora_adamw_lm_val_loss"] = rows[BASELINE].get("lm_val_loss")
        if lm_base:
            out["base_lm_val_loss"] = lm_base.get("base_target_val_loss")
    return out


def method_metrics(cfg: AltLoRAConfig, rows: dict, linear_runs: list[dict], lm_runs: list[dict] | None,
                   profile: str, lm_base: dict | None = None) -> MethodMetrics:
    """Rows per optimizer, baseline LoRA-AdamW, primary ‖sBA − Δ‖_F at the first rank (lower is
    better). Details: every linear run's final numbers (by optimizer, rank, c, lr) and the LM runs'."""
    def brief(r: dict) -> dict:
        return {k: v for k, v in r.items() if k not in ("history", "eval_history")}

    return MethodMetrics(
        method="altlora", profile=profile, headline=headline(rows, lm_base), baseline=BASELINE,
        primary_metric=PRIMARY_METRIC, higher_is_better=False, rows=rows,
        details={"linear_runs": [brief(r) for r in linear_runs], "lm_runs": [brief(r) for r in lm_runs or []],
                 "lm_base": lm_base or {}, "rank": cfg.linear.ranks[0]})
