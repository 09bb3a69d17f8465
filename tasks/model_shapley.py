"""Tasks of the Model Shapley flow: the data (scikit-learn's digits and the Shakespeare corpus,
built when missing), the digits MLP and the causal LM (side by side), the permutation-sampling
ground truth and the estimators' scores of the MLP, one evaluation task per ranking (its MLflow
child run carries its row), then the report."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.config import read_params
from paperline.methods.model_shapley import pipeline, plots
from paperline.methods.model_shapley.config import ModelShapleyConfig
from paperline.methods.model_shapley.pipeline import ShapleyData
from paperline.methods.model_shapley.summary import method_metrics
from tasks import track
from tasks.paths import models_dir, params_path, plots_dir
from tasks.publish import Report
from paperline.train.distributed import DistributedConfig
from tasks.runners import GPU_TAG, gpu_devices, gpu_slot

METHOD = "model_shapley"


def data(cfg: ModelShapleyConfig) -> ShapleyData:
    """The checked inputs, versioned by their contents; the default corpus is built here when
    `dvc repro` has not built it."""
    from tasks import text_corpus

    corpus_cfg = text_corpus.resolve(read_params(params_path()))
    if Path(cfg.lm.corpus_dir) == text_corpus.corpus_dir(corpus_cfg):
        text_corpus.ensure(corpus_cfg)
    checked = pipeline.open_data(cfg)
    return dataclasses.replace(checked, version=track.data_version(checked.files()))


def _digits_checkpoint() -> Path:
    return models_dir(METHOD) / "digits_mlp" / "checkpoint.pt"


def _lm_checkpoint() -> Path:
    return models_dir(METHOD) / "causal_lm" / "checkpoint.pt"


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
@task(name="model_shapley-train-digits", tags=[GPU_TAG], cache_policy=NO_CACHE)
def train_digits(cfg: ModelShapleyConfig, data: ShapleyData, ctx: track.RunContext) -> dict:
    """The digits MLP (CPU: it is tiny)."""
    import torch

    torch.set_num_threads(cfg.threads)
    with gpu_slot(), ctx.child("digits_mlp", params={"digits": cfg.digits.model_dump()}) as run:
        result = pipeline.train_digits(cfg, _digits_checkpoint(), progress=sys.stderr.isatty())
        run.log_history("train_loss", result["history"]["epoch"], result["history"]["train_loss"])
        run.log_metrics({k: result[k] for k in ("val_loss", "test_accuracy", "test_loss", "train_time_s")})
        run.log_artifact(_digits_checkpoint(), "checkpoints")
    return {k: v for k, v in result.items() if k != "history"}


@task(name="model_shapley-train-lm", tags=[GPU_TAG], cache_policy=NO_CACHE)
def train_lm(cfg: ModelShapleyConfig, data: ShapleyData, ctx: track.RunContext,
             distributed: DistributedConfig = DistributedConfig()) -> dict:
    """The causal LM trained briefly (over `distributed`'s devices), its neurons/heads/layers
    scored, the estimator's cost timed."""
    import torch

    torch.set_num_threads(cfg.threads)
    with gpu_devices(distributed.devices) as devices, ctx.child(
            "causal_lm", params={"shape": cfg.lm.shape.model_dump(), "train": cfg.lm.train.model_dump(),
                                 "estimator": cfg.lm.estimator.model_dump(), "device": ",".join(map(str, devices)),
                                 "distributed": distributed.model_dump()}) as run:
        result = pipeline.train_lm(cfg, data, _lm_checkpoint(), devices[0], progress=sys.stderr.isatty(),
                                   on_log=lambda step, m: run.log_metrics({"val_loss_by_step": m["val_loss"]}, step)
                                   if "val_loss" in m else None, distributed=distributed,
                                   device_indices=[d.index for d in devices])
        run.log_history("train_loss", result["history"]["step"], result["history"]["train_loss"])
        run.log_metrics({"val_loss": result["val_loss"], "val_perplexity": result["val_perplexity"],
                         **{f"cost/{k}": v for k, v in result["cost"].items()}})
    return result


@task(name="model_shapley-ground-truth", tags=[GPU_TAG], cache_policy=NO_CACHE)
def ground_truth(cfg: ModelShapleyConfig, trained: dict, ctx: track.RunContext) -> dict:
    """Permutation-sampling Shapley values of the MLP's neurons (resumes from its chunks)."""
    import torch

    torch.set_num_threads(cfg.threads)
    with gpu_slot(), ctx.child("ground_truth", params={"permutations": cfg.permutations}) as run:
        model = pipeline.load_digits_model(cfg, _digits_checkpoint())
        gt = pipeline.ground_truth(cfg, model, models_dir(METHOD) / "ground_truth" / "checkpoint.pt",
                                   progress=sys.stderr.isatty())
        run.log_metrics({k: gt[k] for k in ("split_half_spearman", "sum_phi", "value_full_minus_empty", "seconds")})
    return gt


@task(name="model_shapley-scores", tags=[GPU_TAG], cache_policy=NO_CACHE)
def scores(cfg: ModelShapleyConfig, trained: dict) -> dict:
    """Every estimator's neuron scores of the MLP (validation and shifted task), and the cost."""
    import torch

    torch.set_num_threads(cfg.threads)
    with gpu_slot():
        return pipeline.digits_scores(cfg, pipeline.load_digits_model(cfg, _digits_checkpoint()))


@task(name="model_shapley-evaluate", tags=[GPU_TAG], cache_policy=NO_CACHE)
def evaluate_variant(cfg: ModelShapleyConfig, variant: str, data: ShapleyData, gt: dict, mlp_scores: dict,
                     lm_result: dict, ctx: track.RunContext) -> dict:
    """One ranking: against the ground truth, pruning (MLP and LM), top-neuron fine-tuning."""
    import torch

    torch.set_num_threads(cfg.threads)
    with gpu_slot() as device, ctx.child(variant, params={"variant": variant, "device": str(device)}) as run:
        model = pipeline.load_digits_model(cfg, _digits_checkpoint())
        result = {"digits": pipeline.evaluate_digits(cfg, variant, model, gt, mlp_scores),
                  "lm": pipeline.evaluate_lm(cfg, variant, data, _lm_checkpoint(), lm_result, device)}
        for i, f in enumerate(cfg.prune_fractions):  # the curves, step = percent removed
            step = round(100 * f)
            run.log_metrics({"prune_accuracy": result["digits"]["curve"]["accuracy"][i],
                             "lm_prune_perplexity": result["lm"]["perplexity"][i]}, step)
    return result


@task(name="model_shapley-report", cache_policy=NO_CACHE)
def report(cfg: ModelShapleyConfig, gt: dict, mlp_scores: dict, lm_result: dict, results: dict[str, dict],
           ctx: track.RunContext) -> Report:
    metrics = method_metrics(cfg, gt, mlp_scores, lm_result, results, ctx.profile)
    return Report(metrics, plots.write_all(metrics, mlp_scores, plots_dir(METHOD)))
