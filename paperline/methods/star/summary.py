"""The comparison of a run: per (task, variant, feedback budget), the mean over seeds (with the
sample std) of the normalised return (against the true-reward oracle and the random policy of the
same seed, in the same run), the raw return, the value overestimation, the reward model's held-out
preference accuracy; the claims (claims.py) from the per-seed values; the gaps as plain figures in
the headline; the metrics record (`method_metrics`)."""
from __future__ import annotations

import math

import numpy as np

from paperline.methods.star import claims as star_claims
from paperline.methods.star.claims import RANDOM
from paperline.methods.star.config import StarConfig, row_name
from paperline.metrics import MethodMetrics
from paperline.seeds import mean_over_seeds, sample_std

SEED_FIGURES = ("normalized_return", "return", "random_return", "overestimation", "overestimation_rel",
                "pref_accuracy", "seconds", "labels")


def normalised(ret: float, oracle: float, random: float) -> float:
    """(R − R_random)/(R_oracle − R_random): 1 is the oracle, 0 a uniformly random policy. The
    paper divides by SAC's score; Pendulum's returns are negative, so both ends are measured."""
    span = oracle - random
    return (ret - random) / span if abs(span) > 1e-8 else float("nan")


def _known(value) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def seed_values(results: dict[str, dict]) -> dict[str, list[dict]]:
    """row -> one dict of figures per seed (seed order), the normalised return against that seed's
    oracle; a figure a seed lacks (the oracle's preference accuracy, a NaN) is left out of its dict."""
    out = {}
    for name, res in results.items():
        oracle = results[row_name(res["task"], "oracle", None)]["seeds"]
        out[name] = []
        for s, o in zip(res["seeds"], oracle):
            seed = {k: s[k] for k in SEED_FIGURES if k != "normalized_return"}
            seed["normalized_return"] = normalised(s["return"], o["return"], s["random_return"])
            out[name].append({k: seed[k] for k in SEED_FIGURES if _known(seed[k])})
    return out


def row_over_seeds(per_seed: list[dict], **fixed) -> dict:
    """`fixed` (task, variant, ...), then each figure's mean over the seeds that have it and its sample
    std, the normalised return's range; a figure no seed has is None."""
    row = fixed | mean_over_seeds(per_seed, spread=lambda k: k != "labels")
    for k in SEED_FIGURES:
        row.setdefault(k, None)
    norm = [s["normalized_return"] for s in per_seed if "normalized_return" in s]
    row["normalized_return_min"] = float(min(norm)) if norm else None
    row["normalized_return_max"] = float(max(norm)) if norm else None
    return row


def summarize(cfg: StarConfig, results: dict[str, dict]) -> dict[str, dict]:
    """results: row name -> {"task", "variant", "budget", "seeds": [train_run results, seed order]}."""
    values = seed_values(results)
    rows = {}
    for name, res in results.items():
        row = row_over_seeds(values[name], task=res["task"], variant=res["variant"], budget=res["budget"] or 0,
                             seeds=len(res["seeds"]))
        row["labels"] = round(row["labels"]) if row["labels"] is not None else 0
        rows[name] = row
    return rows


def online_values(cfg: StarConfig, results: dict[str, dict]) -> dict[tuple, list[dict]]:
    """(kind, task, variant, budget) -> per-seed figures, what claims.online reads; with, per (task,
    budget), the random policy's (its return on the same seed's evaluation episodes, normalised: 0)."""
    kinds = {t.name: t.kind for t in cfg.tasks}
    values = seed_values(results)
    out = {}
    for name, res in results.items():
        if res["variant"] == "oracle":
            continue
        key = (kinds[res["task"]], res["task"], res["variant"], res["budget"])
        out[key] = values[name]
        oracle = results[row_name(res["task"], "oracle", None)]["seeds"]
        out.setdefault(key[:2] + (RANDOM, res["budget"]), [
            {"normalized_return": normalised(s["random_return"], o["return"], s["random_return"]),
             "return": s["random_return"]} for s, o in zip(res["seeds"], oracle)])
    return out


def headline(cfg: StarConfig, rows: dict[str, dict]) -> dict:
    """Per task and budget (where both ran): STAR's mean normalised return minus PEBBLE's and minus each
    ablation's, both signed relative overestimations, PMR's preference-accuracy gain over PEBBLE; the
    figures only (the verdicts, with their intervals, are the claims)."""
    out: dict = {"seeds": len(cfg.run_seeds())}
    for task in cfg.tasks:
        for b in task.budgets:
            r = {v: rows.get(row_name(task.name, v, b)) for v in ("star", "pebble", "star_no_pmr", "star_no_pr", "surf")}
            key = f"{task.name}_{b}"
            if r["star"] is None or r["pebble"] is None:
                continue
            out |= {f"{key}_star_normalized_return": r["star"]["normalized_return"],
                    f"{key}_pebble_normalized_return": r["pebble"]["normalized_return"],
                    f"{key}_star_minus_pebble": r["star"]["normalized_return"] - r["pebble"]["normalized_return"],
                    f"{key}_star_overestimation_rel": r["star"]["overestimation_rel"],
                    f"{key}_pebble_overestimation_rel": r["pebble"]["overestimation_rel"]}
            for ablation in ("star_no_pmr", "star_no_pr", "surf"):
                if r[ablation] is not None:
                    out[f"{key}_star_minus_{ablation}"] = (r["star"]["normalized_return"]
                                                           - r[ablation]["normalized_return"])
            if r["star_no_pr"] is not None and None not in (r["star_no_pr"]["pref_accuracy"], r["pebble"]["pref_accuracy"]):
                out[f"{key}_pmr_accuracy_minus_pebble"] = r["star_no_pr"]["pref_accuracy"] - r["pebble"]["pref_accuracy"]
    return out


def mean_curves(results: dict[str, dict]) -> dict[str, dict]:
    """row -> {"step": [...], "mean": [...], "std": [...]} of the true-reward return over seeds (std:
    the sample std, as every row's `_std`)."""
    out = {}
    for name, res in results.items():
        curves = [s["curve"] for s in res["seeds"]]
        length = min(len(c["return"]) for c in curves)
        values = np.array([c["return"][:length] for c in curves])
        out[name] = {"step": curves[0]["step"][:length], "mean": values.mean(0).tolist(),
                     "std": sample_std(values, axis=0).tolist()}
    return out


def offline_seed_values(offline: list[dict]) -> dict[str, list[float]]:
    """extraction (and `dataset`, `random`) -> its normalised return per seed, against the expert (the
    oracle's SAC) and a random policy of the same seed (the random policy's is 0 by definition)."""
    out = {v: [normalised(s["variants"][v]["return"], s["expert_return"], s["random_return"]) for s in offline]
           for v in offline[0]["variants"]}
    out["dataset"] = [normalised(s["dataset_return"], s["expert_return"], s["random_return"]) for s in offline]
    out[RANDOM] = [normalised(s["random_return"], s["expert_return"], s["random_return"]) for s in offline]
    return out


def offline_rows(offline: list[dict]) -> dict[str, dict]:
    """The offline table: a row per extraction (`offline-<variant>`), the mean over seeds (sample
    std), normalised by the expert and a random policy of the same seed, with the shared reward
    model's held-out preference accuracy; and a row for the dataset itself (its mean episode return)."""
    norm = offline_seed_values(offline)
    fixed = {"seeds": len(offline), "labels": offline[0]["labels"]}
    rows = {}
    for v in offline[0]["variants"]:
        per_seed = [{"normalized_return": n, "return": s["variants"][v]["return"], "expert_return": s["expert_return"],
                     "random_return": s["random_return"], "pref_accuracy": s["pref_accuracy"]}
                    for n, s in zip(norm[v], offline)]
        rows[f"offline-{v}"] = {"variant": v, **fixed} | mean_over_seeds(
            [{k: x for k, x in d.items() if _known(x)} for d in per_seed])
    rows["offline-dataset"] = {"variant": "dataset", **fixed} | mean_over_seeds(
        [{"normalized_return": n, "return": s["dataset_return"]} for n, s in zip(norm["dataset"], offline)])
    return rows


def offline_headline(rows: dict[str, dict]) -> dict:
    """STAR's offline mean normalised return minus each baseline's (same reward model)."""
    if "offline-star" not in rows:
        return {}
    return {f"offline_star_minus_{base}": rows["offline-star"]["normalized_return"]
            - rows[f"offline-{base}"]["normalized_return"] for base in ("iql", "awr", "dataset")
            if f"offline-{base}" in rows}


def method_metrics(cfg: StarConfig, results: dict[str, dict], profile: str,
                   offline: list[dict] | None = None) -> MethodMetrics:
    """`offline`: the offline variant's per-seed results (`offline.run_offline`), or None."""
    rows = summarize(cfg, results)
    figures = headline(cfg, rows)
    claims = star_claims.online(online_values(cfg, results))
    tables, details = {}, {}
    if offline:
        tables["offline"] = offline_rows(offline)
        figures |= offline_headline(tables["offline"])
        claims += star_claims.offline(offline_seed_values(offline))
        details["offline"] = [{k: v for k, v in s.items()} for s in offline]
    return MethodMetrics(method="star", profile=profile, headline=figures, primary_metric="normalized_return",
                         higher_is_better=True, rows=rows, tables=tables, claims=claims,
                         details={"curves": mean_curves(results),
                                  "per_seed": {name: [{k: v for k, v in s.items() if k not in ("curve", "reward_stats")}
                                                      for s in res["seeds"]] for name, res in results.items()},
                                  "reward_sessions": {name: [s["reward_stats"] for s in res["seeds"]]
                                                      for name, res in results.items()}} | details)
