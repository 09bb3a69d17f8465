"""The comparison of an HRM-PET run (a row per variant: the mean over seeds of each seed's mean
over the sequences), its claims (paperline/methods/hrm_pet/claims.py, paired per seed on
the mean over the sequences), the gains as plain figures, and the code-vs-paper switch table (spec (g)): each code rule
alone against the paper's, on the same models.

`results` maps a unit key `<sequence>/<seed>/<learner>` to run_learner's output (plus "source")."""
from __future__ import annotations

import statistics

from paperline.methods.hrm_pet import claims as hrm_claims
from paperline.methods.hrm_pet.config import SWITCHES, VARIANT_SPECS, HrmPetConfig
from paperline.methods.hrm_pet.evaluate import run_metrics, switch_name
from paperline.metrics import MethodMetrics
from paperline.seeds import mean_over_seeds

PRIMARY = "final_accuracy"
BASELINE = "hide_lora"
TRIVIAL = "frozen_head"
FIGURES = ("final_accuracy", "forgetting", "matching", "initial_matching", "extra_passes", "forward_passes",
           "oracle_final_accuracy", "absorbed")
PER_SEQUENCE = ("final_accuracy", "matching", "forgetting", "extra_passes")


def unit_key(sequence: str, seed: int, learner: str) -> str:
    return f"{sequence}/{seed}/{learner}"


def _mean(values: list[float]) -> float:
    return float(statistics.fmean(values))


def per_run(cfg: HrmPetConfig, results: dict[str, dict], name: str, learner: str) -> dict[tuple[str, int], dict]:
    """(sequence, seed) -> run_metrics of evaluation `name` on `learner`."""
    return {(s.name, seed): run_metrics(results[unit_key(s.name, seed, learner)]["evaluations"][name])
            for s in cfg.sequences for seed in cfg.run_seeds()}


def seed_row(cfg: HrmPetConfig, runs: dict[tuple[str, int], dict], seed: int, train_seconds: float) -> dict:
    """One seed's figures: the mean over sequences (the figures the runs have; frozen_head has no
    LoRA oracle), then each sequence's own."""
    mine = [runs[(s.name, seed)] for s in cfg.sequences]
    out = {k: _mean([m[k] for m in mine]) for k in FIGURES if k in mine[0]}
    for s in cfg.sequences:
        out |= {f"{k}_{s.name}": runs[(s.name, seed)][k] for k in PER_SEQUENCE}
    return out | {"train_seconds": train_seconds}


def row(cfg: HrmPetConfig, runs: dict[tuple[str, int], dict], seconds: dict[int, float]) -> dict:
    """The mean over seeds of the seed rows, with the sample std over seeds of the primary metric."""
    return mean_over_seeds([seed_row(cfg, runs, seed, seconds[seed]) for seed in cfg.run_seeds()],
                           spread=lambda key: key == PRIMARY)


def summarize(cfg: HrmPetConfig, results: dict[str, dict]) -> tuple[dict[str, dict], dict[str, dict]]:
    """(rows by variant, per-run figures by variant) in the order of cfg.variants."""
    rows: dict[str, dict] = {}
    runs: dict[str, dict] = {}
    for v in cfg.variants:
        learner = VARIANT_SPECS[v][0]
        runs[v] = per_run(cfg, results, v, learner)
        seconds = {seed: _mean([results[unit_key(s.name, seed, learner)]["train_seconds"] for s in cfg.sequences])
                   for seed in cfg.run_seeds()}
        rows[v] = row(cfg, runs[v], seconds)
    return rows, runs


def switch_table(cfg: HrmPetConfig, results: dict[str, dict]) -> dict[str, dict]:
    """switch -> A_N and matching with the paper's rule and with the code's (everything else the
    paper's), per sequence (mean over seeds), and whether the code rule changes any number."""
    paper = per_run(cfg, results, "hrm_pet", "ctird")
    table = {}
    for switch in SWITCHES:
        code = per_run(cfg, results, switch_name(switch), "ctird_code" if switch == "ctird_topk" else "ctird")
        entry: dict = {}
        changed = False
        for s in cfg.sequences:
            for k in ("final_accuracy", "matching"):
                p = _mean([paper[(s.name, seed)][k] for seed in cfg.run_seeds()])
                c = _mean([code[(s.name, seed)][k] for seed in cfg.run_seeds()])
                entry[f"{k}_{s.name}_paper"], entry[f"{k}_{s.name}_code"] = p, c
                changed |= any(paper[key][k] != code[key][k] for key in paper)
        entry["changes_numbers"] = changed
        table[switch] = entry
    return table


def headline(cfg: HrmPetConfig, rows: dict[str, dict], runs: dict[str, dict], switches: dict[str, dict]) -> dict:
    """HRM-PET's and each component's gain over the HiDe-LoRA baseline and the frozen head (A_N,
    matching; means over seeds), per sequence, the smallest gain over the runs, its extra forward
    passes: plain figures; the verdicts are the claims."""
    base, hrm = rows[BASELINE], rows["hrm_pet"]
    out: dict = {"hrm_pet_final_accuracy": hrm[PRIMARY], "hide_lora_final_accuracy": base[PRIMARY],
                 "frozen_head_final_accuracy": rows[TRIVIAL][PRIMARY],
                 "hrm_pet_gain": hrm[PRIMARY] - base[PRIMARY],
                 "hrm_pet_gain_vs_frozen_head": hrm[PRIMARY] - rows[TRIVIAL][PRIMARY],
                 "hrm_pet_extra_passes": hrm["extra_passes"]}
    per_unit = [runs["hrm_pet"][k][PRIMARY] - runs[BASELINE][k][PRIMARY] for k in runs[BASELINE]]
    out["hrm_pet_gain_min_over_runs"] = min(per_unit)
    for s in cfg.sequences:
        out[f"hrm_pet_gain_{s.name}"] = hrm[f"{PRIMARY}_{s.name}"] - base[f"{PRIMARY}_{s.name}"]
    for v in ("drm", "crm", "ctird"):
        if v in rows:
            out[f"{v}_gain"] = rows[v][PRIMARY] - base[PRIMARY]
            out[f"{v}_matching_gain"] = rows[v]["matching"] - base["matching"]
    out["switches_changing_numbers"] = ",".join(k for k, e in switches.items() if e["changes_numbers"]) or "none"
    return out


def method_metrics(cfg: HrmPetConfig, results: dict[str, dict], profile: str) -> MethodMetrics:
    """metrics/hrm_pet.json: a row per variant (HiDe-LoRA the baseline, A_N the primary metric), the
    gains as the headline, the claims, the switch table and a per-run table; per-task curves as details."""
    rows, runs = summarize(cfg, results)
    switches = switch_table(cfg, results)
    per_run_table = {f"{v} {s}/{seed}": {k: m[k] for k in FIGURES if k in m}
                     for v, by in runs.items() for (s, seed), m in by.items()}
    sources = {s.name: results[unit_key(s.name, cfg.run_seeds()[0], "ctird")]["source"] for s in cfg.sequences}
    return MethodMetrics(
        method="hrm_pet", profile=profile, headline=headline(cfg, rows, runs, switches),
        baseline=BASELINE, primary_metric=PRIMARY, higher_is_better=True, rows=rows, claims=hrm_claims.evaluate(runs),
        tables={"code_vs_paper_switches": switches, "runs": per_run_table},
        details={"sources": sources,
                 "accuracy_after_task": {key: {name: [r["accuracy"] for r in recs]
                                               for name, recs in res["evaluations"].items()}
                                         for key, res in results.items()},
                 "lora_loss": {key: [h["lora_loss"] for h in res["history"]] for key, res in results.items()}})
