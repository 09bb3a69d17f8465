"""The comparison of a run: per (task, variant, feedback budget), over seeds, the normalised
return (against the true-reward oracle of the same seed, in the same run), the raw return, the
value overestimation, the reward model's held-out preference accuracy; the claims as booleans
computed from those rows; the metrics record (`method_metrics`)."""
from __future__ import annotations

import math

import numpy as np

from paperline.methods.star.config import StarConfig, row_name
from paperline.metrics import MethodMetrics

CLAIM_VARIANTS = ("star", "pebble")


def normalised(ret: float, oracle: float, random: float) -> float:
    """(R − R_random)/(R_oracle − R_random): 1 is the oracle, 0 a uniformly random policy. The
    paper divides by SAC's score; Pendulum's returns are negative, so both ends are measured."""
    span = oracle - random
    return (ret - random) / span if abs(span) > 1e-8 else float("nan")


def _stats(values: list[float | None]) -> tuple[float | None, float | None]:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    if not vals:
        return None, None
    return float(np.mean(vals)), float(np.std(vals))


def summarize(cfg: StarConfig, results: dict[str, dict]) -> dict[str, dict]:
    """results: row name -> {"task", "variant", "budget", "seeds": [train_run results, seed order]}."""
    rows = {}
    for name, res in results.items():
        oracle = results[row_name(res["task"], "oracle", None)]["seeds"]
        seeds = res["seeds"]
        norm = [normalised(s["return"], o["return"], s["random_return"]) for s, o in zip(seeds, oracle)]
        row = {"task": res["task"], "variant": res["variant"], "budget": res["budget"] or 0, "seeds": len(seeds)}
        for key, values in (("normalized_return", norm), ("return", [s["return"] for s in seeds]),
                            ("random_return", [s["random_return"] for s in seeds]),
                            ("overestimation", [s["overestimation"] for s in seeds]),
                            ("overestimation_rel", [s["overestimation_rel"] for s in seeds]),
                            ("pref_accuracy", [s["pref_accuracy"] for s in seeds]),
                            ("seconds", [s["seconds"] for s in seeds])):
            row[key], row[f"{key}_std"] = _stats(values)
        row["normalized_return_min"] = float(np.nanmin(norm)) if len(norm) else None
        row["normalized_return_max"] = float(np.nanmax(norm)) if len(norm) else None
        row["labels"] = int(np.mean([s["labels"] for s in seeds]))
        rows[name] = row
    return rows


def claims(cfg: StarConfig, rows: dict[str, dict]) -> dict:
    """Per task and budget (where both variants ran): STAR's normalised return minus PEBBLE's, and
    whether it is above (`star_above_pebble`); whether STAR's signed relative overestimation is
    lower (`star_less_overestimation`); the ablations below the full method; PMR's held-out
    preference accuracy against PEBBLE's. `claim_shown`: the first two hold on every task and budget."""
    out: dict = {}
    both = []
    for task in cfg.tasks:
        for b in task.budgets:
            r = {v: rows.get(row_name(task.name, v, b)) for v in ("star", "pebble", "star_no_pmr", "star_no_pr", "surf")}
            key = f"{task.name}_{b}"
            if r["star"] is None or r["pebble"] is None:
                continue
            gap = r["star"]["normalized_return"] - r["pebble"]["normalized_return"]
            above = gap > 0
            less_over = r["star"]["overestimation_rel"] < r["pebble"]["overestimation_rel"]
            out |= {f"{key}_star_minus_pebble": gap, f"{key}_star_above_pebble": above,
                    f"{key}_star_overestimation_rel": r["star"]["overestimation_rel"],
                    f"{key}_pebble_overestimation_rel": r["pebble"]["overestimation_rel"],
                    f"{key}_star_less_overestimation": less_over}
            for ablation in ("star_no_pmr", "star_no_pr", "surf"):
                if r[ablation] is not None:
                    out[f"{key}_star_above_{ablation}"] = (r["star"]["normalized_return"]
                                                          > r[ablation]["normalized_return"])
            if r["star_no_pr"] is not None and None not in (r["star_no_pr"]["pref_accuracy"], r["pebble"]["pref_accuracy"]):
                out[f"{key}_pmr_accuracy_minus_pebble"] = r["star_no_pr"]["pref_accuracy"] - r["pebble"]["pref_accuracy"]
            both.append(above and less_over)
    out["claim_shown"] = bool(both) and all(both)
    return out


def mean_curves(results: dict[str, dict]) -> dict[str, dict]:
    """row -> {"step": [...], "mean": [...], "std": [...]} of the true-reward return over seeds."""
    out = {}
    for name, res in results.items():
        curves = [s["curve"] for s in res["seeds"]]
        length = min(len(c["return"]) for c in curves)
        values = np.array([c["return"][:length] for c in curves])
        out[name] = {"step": curves[0]["step"][:length], "mean": values.mean(0).tolist(), "std": values.std(0).tolist()}
    return out


def offline_rows(offline: list[dict]) -> dict[str, dict]:
    """The offline table: a row per extraction (`offline-<variant>`) over seeds, normalised by the
    expert (the oracle's SAC) and a random policy of the same seed, with the shared reward model's
    held-out preference accuracy; and a row for the dataset itself (its mean episode return)."""
    rows = {}
    for v in offline[0]["variants"]:
        norm = [normalised(s["variants"][v]["return"], s["expert_return"], s["random_return"]) for s in offline]
        row = {"variant": v, "seeds": len(offline), "labels": offline[0]["labels"]}
        for key, values in (("normalized_return", norm), ("return", [s["variants"][v]["return"] for s in offline]),
                            ("expert_return", [s["expert_return"] for s in offline]),
                            ("random_return", [s["random_return"] for s in offline]),
                            ("pref_accuracy", [s["pref_accuracy"] for s in offline])):
            row[key], row[f"{key}_std"] = _stats(values)
        rows[f"offline-{v}"] = row
    norm = [normalised(s["dataset_return"], s["expert_return"], s["random_return"]) for s in offline]
    rows["offline-dataset"] = {"variant": "dataset", "seeds": len(offline), "labels": offline[0]["labels"]}
    for key, values in (("normalized_return", norm), ("return", [s["dataset_return"] for s in offline])):
        rows["offline-dataset"][key], rows["offline-dataset"][f"{key}_std"] = _stats(values)
    return rows


def offline_claims(rows: dict[str, dict]) -> dict:
    """STAR's offline normalised return minus each baseline's (same reward model), and whether above."""
    out = {}
    if "offline-star" not in rows:
        return out
    for base in ("iql", "awr"):
        if f"offline-{base}" in rows:
            gap = rows["offline-star"]["normalized_return"] - rows[f"offline-{base}"]["normalized_return"]
            out |= {f"offline_star_minus_{base}": gap, f"offline_star_above_{base}": gap > 0}
    return out


def method_metrics(cfg: StarConfig, results: dict[str, dict], profile: str,
                   offline: list[dict] | None = None) -> MethodMetrics:
    """`offline`: the offline variant's per-seed results (`offline.run_offline`), or None."""
    rows = summarize(cfg, results)
    headline = claims(cfg, rows)
    tables, details = {}, {}
    if offline:
        tables["offline"] = offline_rows(offline)
        headline |= offline_claims(tables["offline"])
        details["offline"] = [{k: v for k, v in s.items()} for s in offline]
    return MethodMetrics(method="star", profile=profile, headline=headline, primary_metric="normalized_return",
                         higher_is_better=True, rows=rows, tables=tables,
                         details={"curves": mean_curves(results),
                                  "per_seed": {name: [{k: v for k, v in s.items() if k not in ("curve", "reward_stats")}
                                                      for s in res["seeds"]] for name, res in results.items()},
                                  "reward_sessions": {name: [s["reward_stats"] for s in res["seeds"]]
                                                      for name, res in results.items()}} | details)
