"""The comparison of a run: per (task, variant, feedback budget), the mean over seeds (with the
sample std) of two scores: the paper's (`paper_score`, the headline: the success rate where the
environment reports success, as Meta-World is scored; else the return over the true-reward
oracle's of the same seed) and ours (`normalized_return`, against the oracle and the random policy
of the same seed, in the same run); the raw return, the value overestimation (the paper's, over training), the reward model's held-out
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

SEED_FIGURES = ("paper_score", "normalized_return", "return", "random_return", "success", "overestimation",
                "overestimation_rel", "pref_accuracy", "seconds", "labels")
# overestimation(_rel): the paper's (the critic's mean Q against the current policy's discounted true
# return), the mean over a run's evaluation points from its first labels on
DERIVED = ("paper_score", "normalized_return")  # computed against the seed's oracle, not stored by a run


def normalised(ret: float, oracle: float, random: float) -> float:
    """(R − R_random)/(R_oracle − R_random): 1 is the oracle, 0 a uniformly random policy. The
    paper divides by SAC's score; Pendulum's returns are negative, so both ends are measured."""
    span = oracle - random
    return (ret - random) / span if abs(span) > 1e-8 else float("nan")


def ratio_to_oracle(ret: float, oracle: float) -> float:
    """The paper's normalised score, R / R_oracle (1: SAC on the true reward), defined where returns
    are non-negative (DMControl's, our grid world's). NaN where the oracle's return is not positive:
    on a cost task (Pendulum) a balancing oracle scores ~0 (-1.2 in the smoke), so any ratio of the
    two explodes (R_oracle / R gave 0.002 to 7.2 across seeds); there `normalized_return` is the
    score, the page says so."""
    return ret / oracle if oracle > 0 else float("nan")


def paper_score(seed: dict, oracle: dict) -> float:
    """The paper's score of one seed: the success rate where the environment reports success
    (Meta-World, as the paper, PEBBLE, SURF and MRN report it), else the ratio to the oracle."""
    if seed.get("success") is not None:
        return float(seed["success"])
    return ratio_to_oracle(seed["return"], oracle["return"])


def _known(value) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def seed_values(results: dict[str, dict]) -> dict[str, list[dict]]:
    """row -> one dict of figures per seed (seed order), the normalised return against that seed's
    oracle; a figure a seed lacks (the oracle's preference accuracy, a NaN) is left out of its dict."""
    out: dict[str, list[dict]] = {}
    for name, res in results.items():
        oracle = results[row_name(res["task"], "oracle", None)]["seeds"]
        out[name] = []
        for s, o in zip(res["seeds"], oracle):
            seed = {k: s.get(k) for k in SEED_FIGURES if k not in DERIVED}
            seed["normalized_return"] = normalised(s["return"], o["return"], s["random_return"])
            seed["paper_score"] = paper_score(s, o)
            out[name].append({k: seed[k] for k in SEED_FIGURES if _known(seed[k])})
    return out


def row_over_seeds(per_seed: list[dict], **fixed) -> dict:
    """`fixed` (task, variant, ...), then each figure's mean over the seeds that have it and its sample
    std, the normalised return's range; a figure no seed has is None."""
    row = fixed | mean_over_seeds(per_seed, spread=lambda k: k != "labels")
    for k in SEED_FIGURES:
        row.setdefault(k, None)
    for k in DERIVED:
        values = [s[k] for s in per_seed if k in s]
        row[f"{k}_min"] = float(min(values)) if values else None
        row[f"{k}_max"] = float(max(values)) if values else None
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
    out: dict[tuple, list[dict]] = {}
    for name, res in results.items():
        if res["variant"] == "oracle":
            continue
        key = (kinds[res["task"]], res["task"], res["variant"], res["budget"])
        out[key] = values[name]
        oracle = results[row_name(res["task"], "oracle", None)]["seeds"]
        out.setdefault(key[:2] + (RANDOM, res["budget"]), [
            {"normalized_return": normalised(s["random_return"], o["return"], s["random_return"]),
             "paper_score": paper_score({"return": s["random_return"], "success": s.get("random_success")}, o),
             "return": s["random_return"]} for s, o in zip(res["seeds"], oracle)])
    return out


def headline(cfg: StarConfig, rows: dict[str, dict]) -> dict:
    """Per task and budget (where both ran): STAR's and PEBBLE's mean paper score (the headline) and
    normalised return, STAR's minus PEBBLE's and minus each ablation's in both, both signed relative overestimations, PMR's preference-accuracy gain over PEBBLE; the
    figures only (the verdicts, with their intervals, are the claims)."""
    out: dict = {"seeds": len(cfg.run_seeds())}
    for task in cfg.tasks:
        for b in task.budgets:
            r: dict[str, dict] = {v: rows[row_name(task.name, v, b)]
                                  for v in ("star", "pebble", "star_no_pmr", "star_no_pr", "surf", "mrn")
                                  if row_name(task.name, v, b) in rows}
            key = f"{task.name}_{b}"
            if "star" not in r or "pebble" not in r:
                continue
            out |= {f"{key}_star_paper_score": r["star"]["paper_score"],
                    f"{key}_pebble_paper_score": r["pebble"]["paper_score"],
                    f"{key}_star_minus_pebble_paper_score": _minus(r["star"]["paper_score"], r["pebble"]["paper_score"]),
                    f"{key}_star_normalized_return": r["star"]["normalized_return"],
                    f"{key}_pebble_normalized_return": r["pebble"]["normalized_return"],
                    f"{key}_star_minus_pebble": r["star"]["normalized_return"] - r["pebble"]["normalized_return"],
                    f"{key}_star_overestimation_rel": r["star"]["overestimation_rel"],
                    f"{key}_pebble_overestimation_rel": r["pebble"]["overestimation_rel"]}
            for ablation in ("star_no_pmr", "star_no_pr", "surf", "mrn"):
                if ablation in r:
                    out[f"{key}_star_minus_{ablation}"] = (r["star"]["normalized_return"]
                                                           - r[ablation]["normalized_return"])
                    out[f"{key}_star_minus_{ablation}_paper_score"] = _minus(r["star"]["paper_score"],
                                                                             r[ablation]["paper_score"])
            if "star_no_pr" in r and None not in (r["star_no_pr"]["pref_accuracy"], r["pebble"]["pref_accuracy"]):
                out[f"{key}_pmr_accuracy_minus_pebble"] = r["star_no_pr"]["pref_accuracy"] - r["pebble"]["pref_accuracy"]
    return out


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def mean_curves(results: dict[str, dict]) -> dict[str, dict]:
    """row -> {"step": [...], "mean": [...], "std": [...]} of the true-reward return over seeds (std:
    the sample std, as every row's `_std`), and `overestimation_rel`: the mean over seeds of the
    paper's relative overestimation at each point, over the seeds where it is defined (else None)."""
    out = {}
    for name, res in results.items():
        curves = [s["curve"] for s in res["seeds"]]
        length = min(len(c["return"]) for c in curves)
        values = np.array([c["return"][:length] for c in curves])
        out[name] = {"step": curves[0]["step"][:length], "mean": values.mean(0).tolist(),
                     "std": sample_std(values, axis=0).tolist()}
        if all(len(c.get("overestimation_true_rel", [])) >= length for c in curves):
            points = [[c["overestimation_true_rel"][i] for c in curves] for i in range(length)]
            out[name]["overestimation_rel"] = [float(np.mean([v for v in p if v is not None]))
                                               if any(v is not None for v in p) else None for p in points]
    return out


# the offline variants with a reward model of their own: the key of its held-out accuracy in a seed's
# result (the others share STAR's, `pref_accuracy`)
OWN_REWARD_MODEL = {"mr": "mr_pref_accuracy", "pt": "pt_pref_accuracy"}


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
    std), as a ratio to the expert's return (the paper's way) and normalised by the expert and a
    random policy of the same seed, with its reward model's held-out preference accuracy (STAR's,
    shared, but for `mr`'s and `pt`'s own); and a row for the dataset itself (its mean episode return)."""
    norm = offline_seed_values(offline)
    fixed = {"seeds": len(offline), "labels": offline[0]["labels"]}
    rows = {}
    for v in offline[0]["variants"]:
        per_seed = [{"paper_score": ratio_to_oracle(s["variants"][v]["return"], s["expert_return"]),
                     "normalized_return": n, "return": s["variants"][v]["return"], "expert_return": s["expert_return"],
                     "random_return": s["random_return"],
                     "pref_accuracy": s.get(OWN_REWARD_MODEL.get(v, "pref_accuracy"))}
                    for n, s in zip(norm[v], offline)]
        rows[f"offline-{v}"] = {"variant": v, **fixed} | mean_over_seeds(
            [{k: x for k, x in d.items() if _known(x)} for d in per_seed])
    rows["offline-dataset"] = {"variant": "dataset", **fixed} | mean_over_seeds(
        [{"paper_score": ratio_to_oracle(s["dataset_return"], s["expert_return"]), "normalized_return": n,
          "return": s["dataset_return"]} for n, s in zip(norm["dataset"], offline)])
    return rows


def offline_headline(rows: dict[str, dict]) -> dict:
    """STAR's offline mean normalised return minus each baseline's (the same reward model but for
    `mr`'s, a plain Bradley–Terry one, and `pt`'s, a Preference Transformer)."""
    if "offline-star" not in rows:
        return {}
    return {f"offline_star_minus_{base}": rows["offline-star"]["normalized_return"]
            - rows[f"offline-{base}"]["normalized_return"] for base in ("iql", "awr", "mr", "pt", "dataset")
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
    return MethodMetrics(method="star", profile=profile, headline=figures, primary_metric="paper_score",
                         higher_is_better=True, rows=rows, tables=tables, claims=claims,
                         details={"curves": mean_curves(results),
                                  "per_seed": {name: [{k: v for k, v in s.items() if k not in ("curve", "reward_stats")}
                                                      for s in res["seeds"]] for name, res in results.items()},
                                  "reward_sessions": {name: [s["reward_stats"] for s in res["seeds"]]
                                                      for name, res in results.items()}} | details)
