"""The steps of a Model Shapley run as plain functions (the tasks wrap them): the digits MLP, its
ground truth, the estimators' scores, the LM, and the evaluation of one ranking (variant)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from paperline.data.digits import digits_file
from paperline.methods.model_shapley import cost, digits, estimators, lm, ranking, shapley
from paperline.methods.model_shapley.checkpoints import load_trained
from paperline.methods.model_shapley.config import ModelShapleyConfig

LAYER = "hidden"  # the digits MLP's scored block: [W1 | b1]


@dataclass(frozen=True)
class ShapleyData:
    """The inputs (picklable, passed to the tasks): the prepared text corpus; the digits are
    scikit-learn's. `version` is set by the flow from the files' contents."""

    corpus_dir: str
    vocab_size: int
    version: str = ""

    def files(self) -> list[Path]:
        return [digits_file()] + [Path(self.corpus_dir) / n for n in ("train.bin", "val.bin", "tokenizer.json")]


def open_data(cfg: ModelShapleyConfig) -> ShapleyData:
    """The corpus checked (files, vocabulary, length) and the digits loaded once (bad arrays fail here)."""
    from paperline.data.text_corpus import load_corpus

    corpus = load_corpus(cfg.lm.corpus_dir, cfg.lm.block_size)
    digits_tasks(cfg)
    return ShapleyData(str(cfg.lm.corpus_dir), corpus.vocab_size)


def digits_tasks(cfg: ModelShapleyConfig) -> digits.DigitsTasks:
    d = cfg.digits
    return digits.load_tasks(d.val_fraction, d.test_fraction, d.noise_std, cfg.seed)


def digits_layers(model) -> dict:
    return {LAYER: model[0]}


def train_digits(cfg: ModelShapleyConfig, checkpoint: Path, progress: bool = False) -> dict:
    d = cfg.digits
    tasks = digits_tasks(cfg)
    model = digits.make_mlp(d.hidden, cfg.seed)
    result = digits.train_mlp(model, tasks.train, d.epochs, d.batch_size, d.lr, d.weight_decay, cfg.seed,
                              checkpoint_path=checkpoint, progress=progress)
    full = torch.ones(1, d.hidden, dtype=torch.bool)
    test = digits.pruning_curve(model, tasks.test, torch.zeros(d.hidden), [0.0])
    return {**result, "val_loss": float(-digits.value_function(model, tasks.val)(full)[0]),
            "test_accuracy": test["accuracy"][0], "test_loss": test["loss"][0]}


def load_digits_model(cfg: ModelShapleyConfig, checkpoint: Path):
    model = digits.make_mlp(cfg.digits.hidden, cfg.seed)
    load_trained(model, checkpoint)
    return model.eval()


def ground_truth(cfg: ModelShapleyConfig, model, checkpoint: Path | None, progress: bool = False) -> dict:
    """Permutation-sampling Shapley values of the hidden neurons in the game v(S) = −validation loss
    (spec §e), checkpointed every chunk; with the split-half rank stability and the exact
    efficiency check Σφ = v(N) − v(∅)."""
    from paperline.train.checkpoint import Resumable

    tasks = digits_tasks(cfg)
    value = digits.value_function(model, tasks.val)
    n = cfg.digits.hidden
    generator = torch.Generator().manual_seed(cfg.seed)
    run = Resumable(checkpoint, {"permutations": cfg.permutations, "chunk": cfg.permutation_batch, "seed": cfg.seed,
                                 "digits": cfg.digits.model_dump()}, every=1, generator=generator)
    state = run.resume()
    result = shapley.permutation_shapley(value, n, cfg.permutations, generator, cfg.permutation_batch, state,
                                         on_chunk=lambda s: run.save(s), progress=progress)
    full, empty = value(torch.ones(1, n, dtype=torch.bool))[0], value(torch.zeros(1, n, dtype=torch.bool))[0]
    phi = result["phi"]
    return {"phi": phi.tolist(), "stderr": result["stderr"].tolist(),
            "split_half_spearman": shapley.spearman(result["phi_first_half"], result["phi_second_half"]),
            "sum_phi": float(phi.sum()), "value_full_minus_empty": float(full - empty),
            "permutations": result["done"], "seconds": run.elapsed()}


def attribute_digits(cfg: ModelShapleyConfig, model, split: digits.Split, seed_offset: int) -> estimators.Attribution:
    e = cfg.estimator
    batches = digits.sample_batches(split, e.batch_size, e.batches, torch.Generator().manual_seed(cfg.seed + seed_offset))
    return estimators.attribute(model, digits_layers(model), batches, digits.mean_ce, e.fisher_rho,
                                digits.sampled_ce if e.fisher == "sampled" else None)


def unit_lists(attribution: estimators.Attribution, block: str) -> dict[str, list[float]]:
    return {k: estimators.unit_sums(v).tolist() for k, v in attribution.scores(block).items()}


def digits_scores(cfg: ModelShapleyConfig, model) -> dict:
    """The estimators' neuron scores on the game's data (validation) and on the shifted task's
    training data (what the fine-tuning selects by), the efficiency check of the closed form on
    the real loss (Σφ against L(θ) − L(θ with every neuron removed)), and the cost measurement."""
    tasks = digits_tasks(cfg)
    val = attribute_digits(cfg, model, tasks.val, 1)
    shifted = attribute_digits(cfg, model, tasks.shifted_train, 2)
    n = cfg.digits.hidden
    value = digits.value_function(model, tasks.val)
    loss_drop = float(-(value(torch.ones(1, n, dtype=torch.bool)) - value(torch.zeros(1, n, dtype=torch.bool)))[0])
    e = cfg.estimator
    x, y = digits.sample_batches(tasks.train, e.batch_size, 1, torch.Generator().manual_seed(cfg.seed))[0]
    times = cost.step_times(model, digits_layers, x, y, digits.mean_ce,
                            digits.sampled_ce if e.fisher == "sampled" else None, e.fisher_rho, cfg.timing_repeats)
    units = unit_lists(val, LAYER)
    return {"val": units, "shifted": unit_lists(shifted, LAYER),
            "sum_phi": sum(units["phi"]), "loss_full_minus_empty": loss_drop,
            "sum_paper_phi": sum(units["paper_phi"]), "cost": times}


def importance(variant: str, units: dict[str, list[float]], seed: int) -> torch.Tensor:
    tensors = {k: torch.tensor(v, dtype=torch.float64) for k, v in units.items()}
    return estimators.unit_importance(variant, tensors, torch.Generator().manual_seed(seed))


def _auc(values: list[float]) -> float:
    """The mean over the pruned fractions (equally spaced in the configs): the area under the curve."""
    return sum(values) / len(values)


def evaluate_digits(cfg: ModelShapleyConfig, variant: str, model, gt: dict, scores: dict) -> dict:
    """One ranking on the digits MLP: Spearman with the signed ground truth φ, the pruning curve on
    the test split, the top-neuron fine-tuning on the shifted task (random: the mean of its repeats)."""
    tasks = digits_tasks(cfg)
    f = cfg.finetune
    repeats = f.random_repeats if variant == "random" else 1
    spearmans, curves, tuned = [], [], []
    for r in range(repeats):
        imp = importance(variant, scores["val"], cfg.seed + 100 + r)
        spearmans.append(shapley.spearman(imp, torch.tensor(gt["phi"])))
        curves.append(digits.pruning_curve(model, tasks.test, imp, cfg.prune_fractions))
        units = ranking.top_units(importance(variant, scores["shifted"], cfg.seed + 200 + r), f.top_fraction)
        tuned.append(digits.finetune_units(model, units, tasks.shifted_train, tasks.shifted_test, f.steps,
                                           f.batch_size, f.lr, cfg.seed))
    accuracy = [sum(c["accuracy"][i] for c in curves) / repeats for i in range(len(cfg.prune_fractions))]
    loss = [sum(c["loss"][i] for c in curves) / repeats for i in range(len(cfg.prune_fractions))]
    return {"spearman_vs_shapley": sum(spearmans) / repeats,
            "prune_accuracy_auc": _auc(accuracy), "prune_loss_auc": _auc(loss),
            "finetune_shift_accuracy": sum(t["accuracy"] for t in tuned) / repeats,
            "finetune_shift_loss": sum(t["loss"] for t in tuned) / repeats,
            "finetune_units": tuned[0]["units"], "shift_accuracy_before": tuned[0]["accuracy_before"],
            "curve": {"fraction": list(cfg.prune_fractions), "accuracy": accuracy, "loss": loss}}


def lm_model(cfg: ModelShapleyConfig, vocab_size: int):
    from paperline.nn.causal_lm import CausalLM

    return CausalLM.seeded(lm.lm_config(cfg.lm.shape, vocab_size, cfg.lm.block_size),
                           torch.Generator().manual_seed(cfg.seed))


def lm_windows(cfg: ModelShapleyConfig, data: ShapleyData):
    from paperline.data.text_corpus import load_corpus
    from paperline.train.lm import validation_windows

    corpus = load_corpus(data.corpus_dir, cfg.lm.block_size, data.vocab_size)
    return corpus, validation_windows(corpus.val, cfg.lm.block_size, cfg.lm.eval_windows)


def train_lm(cfg: ModelShapleyConfig, data: ShapleyData, checkpoint: Path, device, progress: bool = False,
             on_log=None, distributed=None, device_indices: list[int] | None = None) -> dict:
    """The shared causal LM trained briefly (paperline.train.lm, resumable; over devices by
    `distributed`, params/runtime.yaml runtime.distributed), then its neurons, heads and layers scored on
    training windows, and the estimator's cost against a training step."""
    from paperline.data.tokens import sample_windows
    from paperline.train.distributed import DistributedConfig
    from paperline.train.lm import LMTrainSettings, train_lm_spread

    corpus, _ = lm_windows(cfg, data)
    model = lm_model(cfg, data.vocab_size)
    settings = LMTrainSettings.from_config(cfg.lm.train, cfg.lm.block_size, cfg.seed)
    result = train_lm_spread(distributed or DistributedConfig(), model, corpus.train, corpus.val, settings, device,
                             device_indices=device_indices, checkpoint_path=checkpoint,
                             fingerprint={"data": data.version}, progress=progress, description="causal_lm",
                             on_log=on_log)
    e = cfg.lm.estimator
    generator = torch.Generator().manual_seed(cfg.seed + 1)
    batches = [tuple(t.to(device) for t in sample_windows(corpus.train, e.batch_size, cfg.lm.block_size, generator))
               for _ in range(e.batches)]
    sampled = lm.lm_sampled_loss if e.fisher == "sampled" else None
    attribution = estimators.attribute(model, lm.neuron_blocks(model), batches, lm.lm_loss, e.fisher_rho, sampled,
                                       progress=progress, description="lm fisher")
    units = {k: v.tolist() for k, v in lm.unit_scores(attribution, cfg.lm.shape.num_layers).items()}
    x, y = batches[0]
    times = cost.step_times(model, lm.neuron_blocks, x, y, lm.lm_loss, sampled, e.fisher_rho, cfg.timing_repeats)
    return {"val_loss": result["val_loss"], "val_perplexity": result["val_perplexity"],
            "history": result["history"], "train_time_s": result["train_time_s"], "units": units,
            "aggregates": lm.head_and_layer_phi(attribution, cfg.lm.shape.num_layers, cfg.lm.shape.head_dim),
            "cost": times}


def evaluate_lm(cfg: ModelShapleyConfig, variant: str, data: ShapleyData, checkpoint: Path, lm_scores: dict,
                device) -> dict:
    """One ranking on the LM's neurons: validation perplexity per pruned fraction (random: the mean
    loss over its repeats)."""
    _, windows = lm_windows(cfg, data)
    model = lm_model(cfg, data.vocab_size)
    load_trained(model, checkpoint)
    model.to(device).eval()
    repeats = cfg.finetune.random_repeats if variant == "random" else 1
    losses = []
    for r in range(repeats):
        imp = importance(variant, lm_scores["units"], cfg.seed + 300 + r)
        losses.append(lm.pruning_curve(model, windows, imp, cfg.prune_fractions, cfg.lm.train.batch_size,
                                       device)["loss"])
    loss = [sum(x[i] for x in losses) / repeats for i in range(len(cfg.prune_fractions))]
    return {"fraction": list(cfg.prune_fractions), "loss": loss, "perplexity": [math.exp(x) for x in loss]}
