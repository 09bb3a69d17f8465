"""Tasks of the Model Shapley flow: the data (scikit-learn's digits and the Shakespeare corpus,
built when missing), then for each seed the digits MLP and the causal LM (side by side), the
permutation-sampling ground truth and the estimators' scores of the MLP, one evaluation task per
ranking; then the report. Every step of a seed is an MLflow run `<name>/seed<seed>` nested under
its child run (a ranking's child run carries its row, the mean over seeds)."""
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
from paperline.methods.model_shapley.summary import method_metrics, rows
from paperline.metrics import numeric
from paperline.train.distributed import DistributedConfig
from tasks import track
from tasks.paths import models_dir, params_path, plots_dir
from tasks.publish import Report
from tasks.runners import GPU_TAG, gpu_slot
from tasks.unit import set_threads, unit

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


def _checkpoint(name: str, seed: int) -> Path:
    return models_dir(METHOD) / name / f"seed{seed}" / "checkpoint.pt"


STEPS = ("digits_mlp", "causal_lm", "ground_truth")  # the per-seed steps that are not rankings


def child_runs(cfg: ModelShapleyConfig, ctx: track.RunContext):
    """A child run per ranking and per step, open while the seeds run (each seed's run nested
    under it); a ranking's row, the mean over seeds, lands on it when the flow publishes."""
    return ctx.children({name: {"variant": name, "seeds": cfg.run_seeds()} for name in (*cfg.variants, *STEPS)})


def _at_seed(cfg: ModelShapleyConfig, seed: int) -> ModelShapleyConfig:
    return cfg.model_copy(update={"seed": seed})


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
@task(name="model_shapley-train-digits", tags=[GPU_TAG], cache_policy=NO_CACHE)
def train_digits(cfg: ModelShapleyConfig, seed: int, data: ShapleyData, ctx: track.RunContext,
                 parent: track.Run | None = None) -> dict:
    """The digits MLP at `seed` (CPU: it is tiny)."""
    cfg, ckpt = _at_seed(cfg, seed), _checkpoint("digits_mlp", seed)
    with unit(ctx, f"digits_mlp/seed{seed}", {"digits": cfg.digits.model_dump(), "seed": seed},
              threads=cfg.threads, parent=parent, log_device=False) as u:
        run = u.run
        result = pipeline.train_digits(cfg, ckpt, progress=sys.stderr.isatty())
        run.log_history("train_loss", result["history"]["epoch"], result["history"]["train_loss"])
        run.log_metrics({k: result[k] for k in ("val_loss", "test_accuracy", "test_loss", "train_time_s")})
        run.log_artifact(ckpt, "checkpoints")
    return {k: v for k, v in result.items() if k != "history"}


@task(name="model_shapley-train-lm", tags=[GPU_TAG], cache_policy=NO_CACHE)
def train_lm(cfg: ModelShapleyConfig, seed: int, data: ShapleyData, ctx: track.RunContext,
             distributed: DistributedConfig = DistributedConfig(), parent: track.Run | None = None) -> dict:
    """The causal LM at `seed` trained briefly (over `distributed`'s devices), its neurons/heads/layers
    scored, the estimator's cost timed."""
    cfg = _at_seed(cfg, seed)
    with unit(ctx, f"causal_lm/seed{seed}", {"shape": cfg.lm.shape.model_dump(), "train": cfg.lm.train.model_dump(),
                                             "estimator": cfg.lm.estimator.model_dump(), "seed": seed,
                                             "distributed": distributed.model_dump()},
              threads=cfg.threads, parent=parent, devices=distributed.devices) as u:
        run, devices = u.run, u.devices
        result = pipeline.train_lm(cfg, data, _checkpoint("causal_lm", seed), u.device, progress=sys.stderr.isatty(),
                                   on_log=lambda step, m: run.log_metrics({"val_loss_by_step": m["val_loss"]}, step)
                                   if "val_loss" in m else None, distributed=distributed,
                                   device_indices=[d.index for d in devices])
        run.log_history("train_loss", result["history"]["step"], result["history"]["train_loss"])
        run.log_metrics({"val_loss": result["val_loss"], "val_perplexity": result["val_perplexity"],
                         **{f"cost/{k}": v for k, v in result["cost"].items()}})
    return result


@task(name="model_shapley-ground-truth", tags=[GPU_TAG], cache_policy=NO_CACHE)
def ground_truth(cfg: ModelShapleyConfig, seed: int, trained: dict, ctx: track.RunContext,
                 parent: track.Run | None = None) -> dict:
    """Permutation-sampling Shapley values of the seed's MLP's neurons (resumes from its chunks)."""
    cfg = _at_seed(cfg, seed)
    with unit(ctx, f"ground_truth/seed{seed}", {"permutations": cfg.permutations, "seed": seed},
              threads=cfg.threads, parent=parent, log_device=False) as u:
        run = u.run
        model = pipeline.load_digits_model(cfg, _checkpoint("digits_mlp", seed))
        gt = pipeline.ground_truth(cfg, model, _checkpoint("ground_truth", seed), progress=sys.stderr.isatty())
        run.log_metrics({k: gt[k] for k in ("split_half_spearman", "sum_phi", "value_full_minus_empty", "seconds")})
    return gt


@task(name="model_shapley-scores", tags=[GPU_TAG], cache_policy=NO_CACHE)
def scores(cfg: ModelShapleyConfig, seed: int, trained: dict) -> dict:
    """Every estimator's neuron scores of the seed's MLP (validation and shifted task), and the cost.
    No run of its own (so no RunContext): the prologue's two parts by hand."""
    set_threads(cfg.threads)
    cfg = _at_seed(cfg, seed)
    with gpu_slot():
        return pipeline.digits_scores(cfg, pipeline.load_digits_model(cfg, _checkpoint("digits_mlp", seed)))


@task(name="model_shapley-evaluate", tags=[GPU_TAG], cache_policy=NO_CACHE)
def evaluate_variant(cfg: ModelShapleyConfig, seed: int, variant: str, data: ShapleyData, gt: dict,
                     mlp_scores: dict, lm_result: dict, ctx: track.RunContext,
                     variant_run: track.Run | None = None) -> dict:
    """One ranking at one seed, on its run `<variant>/seed<seed>`: against the ground truth, pruning
    (MLP and LM), top-neuron fine-tuning."""
    cfg = _at_seed(cfg, seed)
    with unit(ctx, f"{variant}/seed{seed}", {"variant": variant, "seed": seed}, threads=cfg.threads,
              parent=variant_run) as u:
        run, device = u.run, u.device
        model = pipeline.load_digits_model(cfg, _checkpoint("digits_mlp", seed))
        result = {"digits": pipeline.evaluate_digits(cfg, variant, model, gt, mlp_scores),
                  "lm": pipeline.evaluate_lm(cfg, variant, data, _checkpoint("causal_lm", seed), lm_result, device)}
        for i, f in enumerate(cfg.prune_fractions):  # the curves, step = percent removed
            step = round(100 * f)
            run.log_metrics({"prune_accuracy": result["digits"]["curve"]["accuracy"][i],
                             "lm_prune_perplexity": result["lm"]["perplexity"][i]}, step)
        run.log_final(numeric(rows({variant: result})[variant]))  # this seed's row
    return result


@task(name="model_shapley-report", cache_policy=NO_CACHE)
def report(cfg: ModelShapleyConfig, per_seed: dict[int, dict], ctx: track.RunContext) -> Report:
    """`per_seed`: seed -> {"gt", "scores", "lm", "results": {ranking: evaluation}}."""
    metrics = method_metrics(cfg, per_seed, ctx.profile)
    first = per_seed[cfg.run_seeds()[0]]
    return Report(metrics, plots.write_all(metrics, first["scores"], plots_dir(METHOD)))
