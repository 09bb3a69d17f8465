"""The AltLoRA comparison (metrics/altlora.json): a row per optimizer, the no-adaptation row, and
the paper's claims (`claims.evaluate`) from the per-seed values.

Linear experiment, per optimizer, at the first rank of `linear.ranks` (r = rank(Δ) by default):
the best lr of the c = 1 sweep at seed 0 (lowest final held-out loss, diverged runs excluded; every
optimizer swept over its own grid of the same size), then at every seed (each its own problem W₀,
Δ, data and initialisation) that lr's final loss and ‖sBA − Δ‖_F, the same at every c of the
rescaling, and the spread across c (max/min of the final loss: 1 is invariant); the row is the mean
over seeds (`<figure>_std` their sample std). Other ranks (seed 0 only): final error columns
`final_error_r<r>`. State floats against LoRA-AdamW's and full fine-tuning's. `no_adaptation`: W₀
itself (ΔW = 0, where every run starts), scored the same way. LM adaptation (when run): the best
lr of the first seed's sweep (lowest held-out target loss), then at every seed that lr's held-out
loss on the target text and on the base's own held-out Shakespeare, the row the mean over seeds."""
from __future__ import annotations

from collections import defaultdict
from typing import Any

from paperline.methods.altlora.claims import NO_ADAPTATION, evaluate
from paperline.methods.altlora.config import BASELINE, AltLoRAConfig
from paperline.metrics import MethodMetrics
from paperline.seeds import mean_over_seeds

PRIMARY_METRIC = "final_error"
SEED_FIGURES = ("final_error", "final_loss", "relative_error", "c_spread", "error_c_spread")
LM_SEED_FIGURES = ("lm_val_loss", "lm_source_val_loss")


def _label(c: float) -> str:
    return f"{c:g}"


def _ratio(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return (max(present) / min(present)) if len(present) == len(values) else None


def seed_figures(cfg: AltLoRAConfig, runs: list[dict], name: str, seed: int) -> dict[str, Any] | None:
    """One optimizer's figures at one seed, first rank: its best-lr run at c = 1 and under every c
    (None: it diverged at every lr)."""
    rank = cfg.linear.ranks[0]
    mine = [r for r in runs if r["optimizer"] == name and r["rank"] == rank and r.get("seed", 0) == seed]
    best = next((r for r in mine if r["role"] == "best"), None)
    if name == "full_ft":  # no factors: its best sweep run at c = 1 stands for every c
        finite = [r for r in mine if r["c"] == 1.0 and not r["diverged"]]
        best = min(finite, key=lambda r: r["final_loss"]) if finite else None
    if best is None:
        return None
    out: dict[str, Any] = {"lr": best["lr"], "final_error": best["final_error"], "final_loss": best["final_loss"],
                           "relative_error": best["relative_error"]}
    for c in cfg.linear.scales:
        run = best if (c == 1.0 or name == "full_ft") else next(
            (r for r in mine if r["role"] == "rescaled" and r["c"] == c), None)
        kept = None if run is None or run["diverged"] else run
        out[f"final_loss_c{_label(c)}"] = kept["final_loss"] if kept is not None else None
        out[f"final_error_c{_label(c)}"] = kept["final_error"] if kept is not None else None
    out["c_spread"] = _ratio([out[f"final_loss_c{_label(c)}"] for c in cfg.linear.scales])
    out["error_c_spread"] = _ratio([out[f"final_error_c{_label(c)}"] for c in cfg.linear.scales])
    return out


def linear_rows(cfg: AltLoRAConfig, runs: list[dict]) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    r0 = cfg.linear.ranks[0]
    seeds = sorted({r.get("seed", 0) for r in runs})
    for name in cfg.optimizers:
        mine = [r for r in runs if r["optimizer"] == name]
        per_seed = [f for f in (seed_figures(cfg, runs, name, s) for s in seeds) if f is not None]
        grid = cfg.linear.lr_grid[name]
        best_lr = per_seed[0]["lr"] if per_seed else None
        row: dict[str, Any] = {PRIMARY_METRIC: None, "best_lr": best_lr, "tuning": f"lr grid of {len(grid)} at seed 0",
                               "seeds": len(per_seed),
                               "lr_at_grid_edge": best_lr is not None and len(grid) > 1 and best_lr in (min(grid), max(grid))}
        if per_seed:
            # a figure a seed lacks (a diverged rescaling) is left out of its mean
            figures = [{k: v for k, v in f.items() if k != "lr" and v is not None} for f in per_seed]
            row |= mean_over_seeds(figures, spread=lambda k: k in SEED_FIGURES)
        for key in ("final_loss", "relative_error", "c_spread", "error_c_spread",
                    *(f"final_{m}_c{_label(c)}" for c in cfg.linear.scales for m in ("loss", "error"))):
            row.setdefault(key, None)
        for rank in cfg.linear.ranks[1:]:  # seed 0's sweep
            sweep = [r for r in mine if r["rank"] == rank and r.get("seed", 0) == 0 and not r["diverged"]]
            best = next((r for r in sweep if r["role"] == "best"), None) if name != "full_ft" else (
                min(sweep, key=lambda r: r["final_loss"]) if sweep else None)
            row[f"final_error_r{rank}"] = best["final_error"] if best else None
        row["diverged_runs"] = sum(r["diverged"] for r in mine)
        any_run = next(r for r in mine if r["rank"] == r0)
        row["state_floats"] = any_run["state_floats"] if not any_run["diverged"] else any_run["state_floats_formula"]
        row["state_floats_formula"] = any_run["state_floats_formula"]
        rows[name] = row
    base_floats = rows[BASELINE]["state_floats_formula"]
    full = rows.get("full_ft", {}).get("state_floats_formula") or 2 * cfg.linear.dim ** 2
    for row in rows.values():
        row[f"state_floats_vs_{BASELINE}"] = row["state_floats_formula"] / base_floats
        row["state_floats_vs_full_ft"] = row["state_floats_formula"] / full
    return rows


def no_adaptation_figures(runs: list[dict], seed: int) -> dict[str, float] | None:
    """W₀ itself at one seed: the first logged point of any of the seed's runs (ΔW = 0 there: B = 0,
    or W = W₀), scored as every trained run is."""
    run = next((r for r in runs if r.get("seed", 0) == seed and r["history"]["step"][:1] == [0]), None)
    if run is None:
        return None
    return {"final_error": run["history"]["error"][0], "final_loss": run["history"]["loss"][0], "relative_error": 1.0}


def seed_rows(cfg: AltLoRAConfig, linear_runs: list[dict], lm_runs: list[dict] | None,
              lm_base: dict | None) -> tuple[dict, dict]:
    """({seed: {variant: figures}} of the linear problem, the same of the LM adaptation): what the
    claims pair by seed (a seed is its index in `cfg.run_seeds()`)."""
    linear: dict[int, dict[str, dict]] = defaultdict(dict)
    for s in sorted({r.get("seed", 0) for r in linear_runs}):
        for name in cfg.optimizers:
            if (f := seed_figures(cfg, linear_runs, name, s)) is not None:
                linear[s][name] = f
        if (f := no_adaptation_figures(linear_runs, s)) is not None:
            linear[s][NO_ADAPTATION] = f
    lm: dict[int, dict[str, dict]] = defaultdict(dict)
    if lm_runs:
        for variant, runs in lm_seed_runs(cfg, lm_runs).items():
            for s, run in runs.items():
                lm[s][variant] = {"lm_val_loss": run["val_loss"], "lm_source_val_loss": run["source_val_loss"]}
        if lm_base and lm_base.get("base_target_val_loss") is not None:
            for s in sorted({r.get("seed", 0) for r in lm_runs}):  # one held-out text: the base's figure at every seed
                lm[s][NO_ADAPTATION] = {"lm_val_loss": lm_base["base_target_val_loss"],
                                        "lm_source_val_loss": lm_base.get("base_source_val_loss")}
    return dict(linear), dict(lm)


def lm_best_runs(cfg: AltLoRAConfig, runs: list[dict]) -> dict[str, dict | None]:
    """{optimizer: its run at the best lr of the first seed's sweep} (lowest held-out target loss,
    diverged runs excluded; None: it diverged at every lr)."""
    out: dict[str, dict | None] = {}
    for name in cfg.lm_optimizers:
        mine = [r for r in runs if r["optimizer"] == name and r.get("seed", 0) == 0 and not r["diverged"]]
        out[name] = min(mine, key=lambda r: r["val_loss"]) if mine else None
    return out


def lm_seed_runs(cfg: AltLoRAConfig, runs: list[dict]) -> dict[str, dict[int, dict]]:
    """{optimizer: {seed: its run at the first seed's best lr}}, the seeds where it did not diverge."""
    out: dict[str, dict[int, dict]] = {}
    for name, best in lm_best_runs(cfg, runs).items():
        out[name] = {} if best is None else {
            r.get("seed", 0): r for r in runs
            if r["optimizer"] == name and r["lr"] == best["lr"] and not r["diverged"]}
    return out


def lm_rows(cfg: AltLoRAConfig, runs: list[dict]) -> dict[str, dict[str, Any]]:
    """{optimizer: {lm_best_lr, lm_val_loss, lm_source_val_loss, ...}}: the first seed's best lr
    (lowest held-out target loss), its losses the mean over the seeds (`_std` their spread)."""
    out: dict[str, dict[str, Any]] = {}
    best_runs, seed_runs = lm_best_runs(cfg, runs), lm_seed_runs(cfg, runs)
    for name in cfg.lm_optimizers:
        assert cfg.lm is not None  # it has LM optimizers
        best, grid = best_runs[name], cfg.lm.lr_grid[name]
        per_seed = [{"lm_val_loss": r["val_loss"], "lm_source_val_loss": r["source_val_loss"]}
                    for _, r in sorted(seed_runs[name].items())]
        out[name] = {"lm_best_lr": best["lr"] if best else None, "lm_tuning": f"lr grid of {len(grid)} at seed 0",
                     "lm_seeds": len(per_seed), "lm_val_loss": None, "lm_source_val_loss": None,
                     **(mean_over_seeds(per_seed, spread=lambda k: k in LM_SEED_FIGURES) if per_seed else {}),
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
    if any(row.get("lm_val_loss") is not None for row in rows.values()):
        out["altlora_over_lora_adamw_lm_val_loss"] = ratio("altlora", BASELINE, "lm_val_loss")
        out["altlora_lm_val_loss"] = rows.get("altlora", {}).get("lm_val_loss")
        out["lora_adamw_lm_val_loss"] = rows[BASELINE].get("lm_val_loss")
        if lm_base:
            out["base_lm_val_loss"] = lm_base.get("base_target_val_loss")
    return out


def method_metrics(cfg: AltLoRAConfig, rows: dict, linear_runs: list[dict], lm_runs: list[dict] | None,
                   profile: str, lm_base: dict | None = None) -> MethodMetrics:
    """Rows per optimizer and the no-adaptation row, baseline LoRA-AdamW, primary ‖sBA − Δ‖_F at
    the first rank (lower is better); the claims from the per-seed values. Details: every linear
    run's final numbers (by optimizer, rank, c, lr, seed) and the LM runs'."""
    def brief(r: dict) -> dict:
        return {k: v for k, v in r.items() if k not in ("history", "eval_history")}

    linear, lm = seed_rows(cfg, linear_runs, lm_runs, lm_base)
    untouched = [seeds[NO_ADAPTATION] for seeds in linear.values() if NO_ADAPTATION in seeds]
    no_adaptation = {NO_ADAPTATION: mean_over_seeds(untouched, spread=lambda k: k in SEED_FIGURES)
                     | {"seeds": len(untouched)} | lm.get(0, {}).get(NO_ADAPTATION, {})} if untouched else {}
    return MethodMetrics(
        method="altlora", profile=profile, headline=headline(rows, lm_base), baseline=BASELINE,
        primary_metric=PRIMARY_METRIC, higher_is_better=False, rows=rows | no_adaptation,
        claims=evaluate(linear, list(cfg.optimizers), lm, list(cfg.lm_optimizers)),
        details={"linear_runs": [brief(r) for r in linear_runs], "lm_runs": [brief(r) for r in lm_runs or []],
                 "lm_base": lm_base or {}, "rank": cfg.linear.ranks[0]})
