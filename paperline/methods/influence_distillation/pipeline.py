"""Influence Distillation end to end, as plain functions:

    tulu-select stage: start_selection → prepare_selection (the warm-up) → select_method for each
        of random, RDS+-like, exact first-order, Influence Distillation (each timed on its own,
        gradient evaluations counted; a GPU task each in flows/prep_tulu.py) → finish_selection:
        <selection dir>: one JSONL per method, the warm-up checkpoint, selection.json
    the flow's tasks (`load_selection`): finetune_and_evaluate (each selection, same budget)

Targets are the target examples of every target set together; selection is round-robin over them
(spec §b.5), so each target set gets its share. Cost: the exact reference computes a gradient for
every pool sample, Influence Distillation for the landmarks only, plus a JVP pass over the pool
(counted separately as forward passes); both compute the target gradients.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch
from scipy.stats import spearmanr

from paperline.data.tulu import Tokenizer
from paperline.data.tulu_pool import load_pool_dir
from paperline.io import DataError, atomic_path, read_json, write_json
from paperline.methods.influence_distillation import baselines, landmarks
from paperline.methods.influence_distillation.config import InfluenceDistillationConfig
from paperline.methods.influence_distillation.finetune import epoch_batches, evaluate, make_optimizer, train
from paperline.methods.influence_distillation.influence import GradientFeaturizer, adam_coefficients
from paperline.methods.influence_distillation.model import InfluenceLM, TokenizedSet, build_model, tokenize
from paperline.methods.influence_distillation.selection import round_robin
from paperline.seeds import seeded_init

SELECTION_FILE = "selection.json"  # written last: the selection directory is complete and current
WARMUP_CHECKPOINT = "warmup.pt"
# parameters the selection does not read (the flow may change them without a new selection)
NOT_SELECTION_KEYS = ("pool_dir", "finetune_epochs", "finetune_lr", "qp", "threads",
                      "landmark_curve",  # a figure beside the selection: it changes no selection
                      "seeds")  # the fine-tuning seeds: the selection is made once, at `seed`
RANDOM_DRAW = 3  # the random selection of seed s draws with seed s + 3 (the stage's at `seed`)

LM_BASE_KEYS = ("lm_base_path", "lm_base_tokenizer")  # model: lm_base's paths

# sub-datasets of the embedded pool that match a target set (for the selection composition)
MATCHING = {"gsm8k_like": "gsm_symbolic", "squad_like": "span_extraction", "mmlu_like": "multiple_choice_facts"}


@dataclass
class Prepared:
    model: InfluenceLM
    tokenizer: Tokenizer
    pool: TokenizedSet
    targets: TokenizedSet | None  # every target set's target examples, concatenated (None: fine-tuning)
    target_names: list[str]  # the target set of each row of `targets`
    evals: dict[str, TokenizedSet]

    def to(self, device) -> "Prepared":
        self.model.to(device)
        self.pool = self.pool.to(device)
        self.targets = self.targets.to(device) if self.targets is not None else None
        self.evals = {n: e.to(device) for n, e in self.evals.items()}
        return self


def prepare(cfg: InfluenceDistillationConfig, pool_dir: str | Path) -> Prepared:
    pool, target_sets, eval_sets = load_pool_dir(pool_dir)
    model, tok = build_model(cfg, cfg.seed)
    names = sorted(target_sets)
    target_records = [r for n in names for r in target_sets[n]]
    return Prepared(model, tok, tokenize(pool, tok, cfg.max_length), tokenize(target_records, tok, cfg.max_length),
                    [n for n in names for _ in target_sets[n]],
                    {n: tokenize(eval_sets[n], tok, cfg.max_length) for n in names})


def prepare_finetune(cfg: InfluenceDistillationConfig, pool_dir: str | Path, ids: list[str]) -> Prepared:
    """What a fine-tuning needs: the selected samples alone, tokenized in `ids`' order (row i is
    ids[i]), and the eval splits; the rest of the pool and the target examples are never tokenized."""
    pool, target_sets, eval_sets = load_pool_dir(pool_dir)
    model, tok = build_model(cfg, cfg.seed)
    by_id = {r.id: r for r in pool}
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise DataError(f"{pool_dir}/pool.jsonl: no sample with id {missing[0]!r} of the selection "
                         f"({len(missing)} missing); re-run tulu-select on this pool")
    return Prepared(model, tok, tokenize([by_id[i] for i in ids], tok, cfg.max_length), None, [],
                    {n: tokenize(eval_sets[n], tok, cfg.max_length) for n in sorted(target_sets)})


def warmup_fingerprint(cfg: InfluenceDistillationConfig, prep: Prepared) -> dict:
    keys = ("model", "llama", "hf_model_path", *_lm_base_keys(cfg), "max_length", "warmup_samples", "warmup_steps", "lr", "betas",
            "eps", "weight_decay", "batch_size", "seed")
    return {**{k: getattr(cfg, k) for k in keys}, "pool": prep.pool.ids[:50], "n": len(prep.pool)}


def warm_up(cfg: InfluenceDistillationConfig, prep: Prepared, checkpoint_path: Path | None) -> tuple[torch.optim.Optimizer, dict]:
    """AdamW on `warmup_samples` random pool samples for `warmup_steps` steps; the optimizer (its
    moments) is returned for the Adam-aware influence and the fine-tuning."""
    n = min(cfg.warmup_samples, len(prep.pool))
    subset = baselines.random_selection(len(prep.pool), n, cfg.seed + 7)
    batches = epoch_batches(n, cfg.batch_size, -(-cfg.warmup_steps * cfg.batch_size // n), cfg.seed)[:cfg.warmup_steps]
    optimizer = make_optimizer(prep.model, cfg, cfg.lr)
    history = train(prep.model, optimizer, prep.pool, subset, batches, checkpoint_path, warmup_fingerprint(cfg, prep),
                    micro_batch_size=cfg.micro_batch_size)
    return optimizer, history


def _spearman(estimate: torch.Tensor, exact: torch.Tensor, rows: np.ndarray) -> dict:
    est, ref = estimate.numpy()[rows], exact.numpy()[rows]
    per_target = [spearmanr(est[:, j], ref[:, j]).statistic for j in range(ref.shape[1])]
    return {"spearman_mean_over_targets": float(np.nanmean(per_target)),
            "spearman_of_target_mean": float(spearmanr(est.mean(1), ref.mean(1)).statistic)}


def select_method(cfg: InfluenceDistillationConfig, prep: Prepared, adam: torch.Tensor | None, method: str) -> dict:
    """One selection method of `cfg.methods`, timed on its own: {"indices", "wall_s",
    "gradient_evaluations", "forward_passes", "score" (pool x targets, None for random)}, plus
    "plain_scores" (exact first-order, Adam-aware) and "landmarks" (Influence Distillation)."""
    model, k = prep.model, cfg.select_k
    started = time.perf_counter()
    forward_passes, grads, score, extra = 0, 0, None, {}

    def featurizer() -> GradientFeaturizer:
        return GradientFeaturizer(model, model.down_proj_names(), cfg.grad_proj_dim, cfg.seed + 11, adam,
                                  cfg.grad_max_elements, cfg.grad_chunk)

    if method == "random":
        chosen = baselines.random_selection(len(prep.pool), k, cfg.seed + RANDOM_DRAW)
    elif method == "rds_plus":
        assert prep.targets is not None  # selection scores the pool against the targets
        pool_emb = baselines.mean_pooled_embeddings(model, prep.pool, cfg.eval_batch_size)
        target_emb = baselines.mean_pooled_embeddings(model, prep.targets, cfg.eval_batch_size)
        score = baselines.rds_scores(pool_emb, target_emb)
        chosen, forward_passes = round_robin(score, k, cfg.seed + 19), len(prep.pool) + len(prep.targets)
    elif method == "exact_first_order":
        assert prep.targets is not None  # selection scores the pool against the targets
        feat = featurizer()
        target_f = feat.features(prep.targets, range(len(prep.targets)), source=False)
        pool_f, pool_plain = feat.features_both(prep.pool, range(len(prep.pool)))
        score = pool_f @ target_f.T
        chosen, grads = round_robin(score, k, cfg.seed + 19), feat.evaluations
        if adam is not None:  # the plain-gradient influence beside the Adam-aware one (same gradients)
            extra["plain_scores"] = pool_plain @ target_f.T
    else:  # influence_distillation
        assert prep.targets is not None  # selection scores the pool against the targets
        feat = featurizer()
        emb = landmarks.jvp_embeddings(model, prep.pool, cfg.jvp_blocks, cfg.jvp_tangents, cfg.jvp_proj_dim,
                                       cfg.seed + 13, cfg.eval_batch_size)
        forward_passes = len(prep.pool) * cfg.jvp_tangents
        landmark_idx = landmarks.choose_landmarks(len(prep.pool), min(cfg.num_landmarks, len(prep.pool)),
                                                  cfg.seed + 17)
        target_f = feat.features(prep.targets, range(len(prep.targets)), source=False)
        p_landmarks = feat.features(prep.pool, landmark_idx.tolist(), source=True) @ target_f.T
        score = landmarks.propagate(emb, landmark_idx, p_landmarks, cfg.kernel_damp, cfg.bandwidth_samples)
        chosen, grads = round_robin(score, k, cfg.seed + 19), feat.evaluations
        extra |= {"landmarks": landmark_idx, "embeddings": emb}
    return {"indices": chosen, "wall_s": time.perf_counter() - started, "gradient_evaluations": grads,
            "forward_passes": forward_passes, "score": score, **extra}


def adam_of(cfg: InfluenceDistillationConfig, prep: Prepared, optimizer: torch.optim.Optimizer) -> torch.Tensor | None:
    """The warm-up's Adam coefficients over the down_proj weights (None: plain-gradient influence)."""
    return adam_coefficients(optimizer, prep.model, prep.model.down_proj_names()) if cfg.adam_aware else None


def compare_selections(results: dict[str, dict], pool_size: int, k: int) -> dict[str, float]:
    """The propagated-vs-exact comparison when both ran (`select_method`'s results): Spearman
    correlations on the non-landmark samples, cost ratios, overlap."""
    if "exact_first_order" not in results or "influence_distillation" not in results:
        return {}
    ref, id_ = results["exact_first_order"], results["influence_distillation"]
    exact = ref["score"]
    others = np.setdiff1d(np.arange(pool_size), id_["landmarks"].numpy())
    comparison = {f"id_vs_exact_{k_}": v for k_, v in _spearman(id_["score"], exact, others).items()}
    if "rds_plus" in results:
        comparison |= {f"rds_vs_exact_{k_}": v for k_, v in _spearman(results["rds_plus"]["score"], exact, others).items()}
    if "plain_scores" in ref:
        comparison |= {f"plain_vs_adam_exact_{k_}": v for k_, v in
                       _spearman(ref["plain_scores"], exact, np.arange(pool_size)).items()}
    return comparison | {"cost_ratio_gradient_evaluations": id_["gradient_evaluations"] / ref["gradient_evaluations"],
                         "cost_ratio_wall_time": id_["wall_s"] / ref["wall_s"],
                         "selection_overlap_id_exact": len(set(id_["indices"]) & set(ref["indices"])) / k}


def spearman_by_target(results: dict[str, dict], target_rows: Sequence[str]) -> dict[str, dict[str, float]]:
    """Per target set (`target_rows`: the set of each target example, the scores' columns): the
    propagated (and RDS+-like) influence's Spearman against the exact influence, averaged over that
    set's examples, on the non-landmark samples: which target the propagation loses the exact
    ranking for (a selection is made per target example, round-robin). Empty without both methods."""
    if "exact_first_order" not in results or "influence_distillation" not in results:
        return {}
    exact, id_ = results["exact_first_order"]["score"], results["influence_distillation"]
    others = np.setdiff1d(np.arange(len(exact)), id_["landmarks"].numpy())
    out = {}
    for name in sorted(set(target_rows)):
        cols = [j for j, t in enumerate(target_rows) if t == name]
        row = {"id_vs_exact": _spearman(id_["score"][:, cols], exact[:, cols], others)["spearman_mean_over_targets"]}
        if "rds_plus" in results:
            row["rds_vs_exact"] = _spearman(results["rds_plus"]["score"][:, cols], exact[:, cols],
                                            others)["spearman_mean_over_targets"]
        out[name] = row
    return out


def landmark_curve(cfg: InfluenceDistillationConfig, results: dict[str, dict]) -> list[dict]:
    """Propagation fidelity against the number of landmarks (the paper's landmark-count ablation):
    for each count of `cfg.landmark_curve` below the pool size, landmarks drawn as Influence
    Distillation draws them (the same seed, so the sets are nested and its own count is its own
    set), their influence read off the exact reference (the same featurizer, projection seed and
    Adam coefficients compute it, so these rows are what the landmarks' gradients would give),
    propagated over Influence Distillation's JVP embeddings; Spearman against the exact influence
    on the other samples. Empty without both methods."""
    if "exact_first_order" not in results or "influence_distillation" not in results:
        return []
    exact, emb = results["exact_first_order"]["score"], results["influence_distillation"]["embeddings"]
    n, curve = len(exact), []
    for count in sorted(c for c in cfg.landmark_curve if c < n):
        marks = landmarks.choose_landmarks(n, count, cfg.seed + 17)
        estimate = landmarks.propagate(emb, marks, exact[marks], cfg.kernel_damp, cfg.bandwidth_samples)
        curve.append({"num_landmarks": count,
                      **_spearman(estimate, exact, np.setdiff1d(np.arange(n), marks.numpy()))})
    return curve


SELECTION_KEYS = ("indices", "wall_s", "gradient_evaluations", "forward_passes")


def select_all(cfg: InfluenceDistillationConfig, prep: Prepared, optimizer: torch.optim.Optimizer) -> dict:
    """Every selection method of `cfg.methods`, one after another in this process, and their
    comparison. Returns {"selections": {method: {...}}, "comparison": {...}, "landmark_curve": [...],
    "scores": {...}}."""
    adam = adam_of(cfg, prep, optimizer)
    results: dict[str, dict] = {method: select_method(cfg, prep, adam, method) for method in cfg.methods}
    return {"selections": {m: {key: r[key] for key in SELECTION_KEYS} for m, r in results.items()},
            "comparison": compare_selections(results, len(prep.pool), cfg.select_k),
            "propagation_by_target": spearman_by_target(results, prep.target_names),
            "landmark_curve": landmark_curve(cfg, results),
            "scores": {m: r["score"] for m, r in results.items() if r["score"] is not None}}


def finetune_and_evaluate(cfg: InfluenceDistillationConfig, prep: Prepared, warm_state: dict, indices: list[int],
                          checkpoint_path: Path | None, method: str, seed: int | None = None) -> dict:
    """Fine-tune from the warm-up (weights and AdamW moments: `warm_state` is its checkpoint, as
    `train` saves it) on `indices` for `finetune_epochs` epochs at a fixed step budget (the same
    for every selection), in the batch order of `seed` (None: `cfg.seed`), then evaluate on each
    target's held-out split."""
    seed = cfg.seed if seed is None else seed
    model = prep.model
    model.load_state_dict(warm_state["state"]["model"])
    optimizer = make_optimizer(model, cfg, cfg.finetune_lr)
    optimizer.load_state_dict(warm_state["state"]["optimizer"])
    for group in optimizer.param_groups:
        group["lr"] = cfg.finetune_lr
    batches = epoch_batches(len(indices), cfg.batch_size, cfg.finetune_epochs, seed + 5)
    fingerprint = {"method": method, "seed": seed, "ids": [prep.pool.ids[i] for i in indices],
                   "warmup": warm_state["fingerprint"], "finetune_lr": cfg.finetune_lr, "finetune_epochs": cfg.finetune_epochs, "batch_size": cfg.batch_size}
    history = train(model, optimizer, prep.pool, indices, batches, checkpoint_path, fingerprint,
                    micro_batch_size=cfg.micro_batch_size)
    return {"history": history, "eval": evaluate_targets(cfg, prep)}


def seed_selection(cfg: InfluenceDistillationConfig, summary: dict, sel_dir: Path, method: str, seed: int
                   ) -> tuple[list[str], dict, Path | None]:
    """What one seed fine-tunes on: (the selected ids, the selection's figures as selection.json
    gives them, its JSONL in `sel_dir` or None). Random selection at another seed than the stage's
    is drawn here as the stage draws it (`seed + RANDOM_DRAW` over the pool's order, the same
    budget), its composition counted anew; every other selection is the stage's own."""
    sel = summary["selections"][method]
    if method != "random" or seed == cfg.seed:
        path = Path(sel_dir) / sel["file"]
        return [json.loads(line)["id"] for line in path.read_text().splitlines()], sel, path
    pool, target_sets, _ = load_pool_dir(cfg.pool_dir)
    chosen = baselines.random_selection(len(pool), cfg.select_k, seed + RANDOM_DRAW)
    figures = {k: v for k, v in sel.items() if not k.startswith("share_") and k != "file"}
    return ([pool[i].id for i in chosen], figures | composition([r.dataset for r in pool], target_sets, chosen),
            None)


def evaluate_targets(cfg: InfluenceDistillationConfig, prep: Prepared) -> dict:
    letters = [prep.tokenizer.encode(c)[0] for c in "ABCD"]
    return {name: evaluate(prep.model, data, cfg.eval_batch_size, letters if name.startswith("mmlu") else None)
            for name, data in prep.evals.items()}


def composition(datasets: Sequence[str], targets: Iterable[str], indices: list[int]) -> dict[str, float]:
    """Share of the selection from each target's matching sub-dataset (`datasets`: the pool's)."""
    chosen = [datasets[i] for i in indices]
    return {f"share_{name}": chosen.count(sub) / len(chosen) for name, sub in MATCHING.items() if name in targets}


def write_selection(path: Path, ids: Sequence[str], datasets: Sequence[str], indices: list[int],
                    score: torch.Tensor | None) -> Path:
    """The selected ids and weights (JSONL): weight 1 each, as training is unweighted (spec §b.5)."""
    with atomic_path(path) as tmp, tmp.open("w") as fh:
        for rank, i in enumerate(indices):
            row = {"id": ids[i], "dataset": datasets[i], "weight": 1.0, "rank": rank}
            if score is not None:
                row["score"] = float(score[i].max())
            fh.write(json.dumps(row) + "\n")
    return path


def _lm_base_keys(cfg: InfluenceDistillationConfig) -> tuple[str, ...]:
    # the shared LM's paths (absolute once validated) only where they are the model: a record of
    # the default model names no machine's checkout
    return LM_BASE_KEYS if cfg.model == "lm_base" else ()


def selection_fingerprint(cfg: InfluenceDistillationConfig) -> dict:
    skip = NOT_SELECTION_KEYS + tuple(k for k in LM_BASE_KEYS if k not in _lm_base_keys(cfg))
    return {k: v for k, v in cfg.model_dump(mode="json").items() if k not in skip}


def start_selection(out_dir: Path) -> Path:
    """The selection folder, marked unfinished (selection.json, written last, removed) while the
    warm-up checkpoint of a killed run stays for its resume."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / SELECTION_FILE).unlink(missing_ok=True)
    return out_dir


def prepare_selection(cfg: InfluenceDistillationConfig, out_dir: Path, device: str | torch.device = "cpu"
                      ) -> tuple[Prepared, torch.optim.Optimizer, dict]:
    """The tokenized pool and targets with the warmed-up model on `device`: AdamW on random pool
    samples, checkpointed to out_dir/warmup.pt (a killed run resumes it; a finished one is loaded),
    which the fine-tuning of the method's flow also starts from. (prep, optimizer, history).

    The global RNG is read only by a loaded model's dropout in the warm-up (`cfg.model: hf`; our
    CausalLM has none): seeded with `cfg.seed` for it, on CPU and CUDA, under `seeded_init` so that
    the draws are this warm-up's alone (a thread beside it neither takes them nor is moved by them)
    and the process's RNG is as it was after."""
    with seeded_init(cfg.seed, cuda=True):
        prep = prepare(cfg, cfg.pool_dir).to(device)
        optimizer, history = warm_up(cfg, prep, Path(out_dir) / WARMUP_CHECKPOINT)
    return prep, optimizer, history


def finish_selection(cfg: InfluenceDistillationConfig, out_dir: Path, warm: dict, results: dict[str, dict]) -> dict:
    """The tulu-select stage's outputs from the warm-up (`warm`: history, before_finetune, the
    pool's ids and datasets, the target names and each target example's set) and `select_method`'s results: out_dir/<method>.jsonl,
    scores.npz (the target-mean exact and propagated influence) and, last, selection.json."""
    out_dir = Path(out_dir)
    ids, datasets = warm["pool_ids"], warm["pool_datasets"]
    summary = {"config": selection_fingerprint(cfg), "pool_size": len(ids), "warmup_history": warm["history"],
               "before_finetune": warm["before_finetune"],
               "comparison": compare_selections(results, len(ids), cfg.select_k),
               "propagation_by_target": spearman_by_target(results, warm["target_rows"]),
               "landmark_curve": landmark_curve(cfg, results), "selections": {}}
    for method, sel in results.items():
        write_selection(out_dir / f"{method}.jsonl", ids, datasets, sel["indices"], sel["score"])
        summary["selections"][method] = {k: sel[k] for k in SELECTION_KEYS if k != "indices"} | {
            "file": f"{method}.jsonl", **composition(datasets, warm["targets"], sel["indices"])}
    if "exact_first_order" in results and "influence_distillation" in results:
        with atomic_path(out_dir / "scores.npz") as tmp, tmp.open("wb") as fh:
            np.savez(fh, exact=results["exact_first_order"]["score"].mean(1).numpy(),
                     propagated=results["influence_distillation"]["score"].mean(1).numpy())
    write_json(out_dir / SELECTION_FILE, summary)
    return summary


def load_selection(cfg: InfluenceDistillationConfig, sel_dir: Path) -> dict:
    """selection.json of `sel_dir`, checked against `cfg`: a selection made with other parameters
    (a `--set` given to the flow but not to tulu-select) is an error naming the keys."""
    sel_dir = Path(sel_dir)
    path = sel_dir / SELECTION_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no finished selection; run the tulu-select stage "
                                "(dvc repro tulu-select, or python -m flows run tulu-select)")
    summary = read_json(path)
    wanted = selection_fingerprint(cfg)
    differ = sorted(k for k in wanted.keys() | summary["config"].keys()
                    if wanted.get(k) != summary["config"].get(k))
    if differ:
        raise DataError(f"{path}: made with other parameters than this run's ({', '.join(differ)}); "
                         "run tulu-select with the same profile and --set options")
    missing = [m for m in cfg.methods if m not in summary["selections"]]
    if missing:
        raise DataError(f"{path}: no selection for {missing}")
    return summary
