"""Tasks of the Memory Decoder flow: the two corpora (the Shakespeare corpus, built when missing,
and the domain corpus in its tokenizer), the two base LMs pretrained on the general corpus, the
kNN-LM datastore of the large base over the domain training set with the MemDec's kNN targets,
the MemDec's training, then the evaluation (λ sweeps, inference time per token) and the report."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.config import read_params
from paperline.methods.memory_decoder import pipeline, plots
from paperline.methods.memory_decoder.config import MemoryDecoderConfig
from paperline.methods.memory_decoder.data import MemDecData, check_corpora, write_domain_corpus
from paperline.methods.memory_decoder.summary import method_metrics
from paperline.train.distributed import DistributedConfig
from tasks import track
from tasks.paths import models_dir, params_path, plots_dir
from tasks.publish import Report
from tasks.runners import GPU_TAG
from tasks.unit import unit

METHOD = "memory_decoder"
BASES = pipeline.BASES


def data(cfg: MemoryDecoderConfig) -> MemDecData:
    """The general corpus (built by the text-corpus stage, or here when missing) and the domain
    corpus, checked before the run starts and versioned by the contents of what they are made from."""
    from tasks import text_corpus

    corpus_cfg = text_corpus.resolve(read_params(params_path()))
    if Path(cfg.general_corpus_dir) == text_corpus.corpus_dir(corpus_cfg):
        text_corpus.ensure(corpus_cfg)
    checked = check_corpora(cfg, models_dir(METHOD) / "domain")
    return dataclasses.replace(checked, version=track.data_version(checked.files()))


def _hf_dir(name: str) -> Path:
    return models_dir(METHOD) / name / "hf"


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
@task(name="memory_decoder-domain", cache_policy=NO_CACHE)
def domain_corpus(cfg: MemoryDecoderConfig, data: MemDecData) -> Path:
    """The domain corpus in the general tokenizer, into models/memory_decoder/domain."""
    return write_domain_corpus(cfg, data)


@task(name="memory_decoder-train-base", tags=[GPU_TAG], cache_policy=NO_CACHE)
def train_base(cfg: MemoryDecoderConfig, size: str, data: MemDecData, ctx: track.RunContext,
               distributed: DistributedConfig = DistributedConfig()) -> dict:
    """A base LM pretrained on the general (Shakespeare train) corpus, spread over devices by
    `distributed` (params/runtime.yaml runtime.distributed)."""
    shape = cfg.base_small if size == "small" else cfg.base_large
    name = f"base_{size}"
    with unit(ctx, name, {"shape": shape.model_dump(), "train": cfg.base_train.model_dump(),
                          "distributed": distributed.model_dump()},
              threads=cfg.threads, devices=distributed.devices) as u:
        run = u.run
        model, result, row = pipeline.train_base(
            cfg, size, data, distributed, u.device, [d.index for d in u.devices], u.models / name / "checkpoint.pt",
            on_log=lambda step, m: run.log_metrics(m, step) if "val_loss" in m else None, progress=sys.stderr.isatty())
        run.log_history("train_loss", result["history"]["step"], result["history"]["train_loss"])
        pipeline.save_lm(model.cpu(), _hf_dir(name), data)
        run.log_metrics(row, step=cfg.base_train.steps)
    return row


@task(name="memory_decoder-datastore", tags=[GPU_TAG], cache_policy=NO_CACHE)
def build_datastore(cfg: MemoryDecoderConfig, data: MemDecData, ctx: track.RunContext) -> dict:
    """The large base's datastore over the domain training set and the MemDec's kNN targets."""
    with unit(ctx, "knn_datastore", {"datastore": cfg.datastore.model_dump(), "knn": cfg.knn.model_dump(),
                                     "keys_from": "base_large"}, threads=cfg.threads, log_device=False) as u:
        row = pipeline.build_datastore(cfg, data, _hf_dir("base_large"), u.device, u.models / "datastore")
        u.run.log_metrics(row)
    return row


def memdec_run(cfg: MemoryDecoderConfig, ctx: track.RunContext):
    """The MemDec's child run, open while its seeds train (each seed's run nested under it)."""
    return ctx.child("memdec", params={"shape": cfg.memdec.model_dump(), "train": cfg.memdec_train.model_dump(),
                                       "seeds": cfg.run_seeds()})


@task(name="memory_decoder-train-memdec", tags=[GPU_TAG], cache_policy=NO_CACHE)
def train_memdec_task(cfg: MemoryDecoderConfig, data: MemDecData, seed: int, ctx: track.RunContext,
                      parent: track.Run | None = None) -> dict:
    """The MemDec of one seed (`pipeline.train_memdec_seed`), on its MLflow run `memdec/seed<seed>`
    (nested under `parent`), saved under models/memory_decoder/memdec/seed<seed>/."""
    name = f"memdec/seed{seed}"
    with unit(ctx, name, {"seed": seed}, threads=cfg.threads, parent=parent) as u:
        run = u.run
        model, row = pipeline.train_memdec_seed(cfg, data, seed, _hf_dir("base_small"), u.models / "datastore", u.device,
                                                u.models / name / "checkpoint.pt",
                                                on_log=lambda step, m: run.log_metrics(m, step))
        pipeline.save_lm(model.cpu(), _hf_dir(name), data)
        run.log_metrics(row, step=cfg.memdec_train.steps)
    return row


@task(name="memory_decoder-evaluate", tags=[GPU_TAG], cache_policy=NO_CACHE)
def evaluate(cfg: MemoryDecoderConfig, data: MemDecData, ctx: track.RunContext) -> dict:
    """Per base size and split: perplexity of base, base + kNN-LM and base + each seed's MemDec over
    the λ sweep (and on the fact tokens of the domain text); then inference time per token (the
    first seed's MemDec: time does not depend on the weights), all in this one task. For the small
    base kNN-LM also runs the large model (its queries' keys) — MemDec needs neither. One MLflow
    child per evaluated variant, `<size>/<variant>`, the sweep as steps (a MemDec's: the mean over
    seeds, each seed's on a run nested under it)."""
    from paperline.methods.memory_decoder.datastore import load_datastore
    from paperline.methods.memory_decoder.summary import mean_sweep

    seeds = cfg.run_seeds()
    with unit(ctx, threads=cfg.threads) as u:  # the runs are logged after, outside the slot
        device = u.device
        bases = {size: pipeline.load_lm(_hf_dir(f"base_{size}")).to(device) for size in BASES}
        memdecs = {seed: pipeline.load_lm(_hf_dir(f"memdec/seed{seed}")).to(device) for seed in seeds}
        store, _ = load_datastore(u.models / "datastore")
        splits = pipeline.eval_splits(cfg, data)
        log_p = pipeline.split_log_probs(cfg, bases, memdecs, store, splits, device)
        results = {seed: pipeline.perplexity_sweeps(log_p, cfg.lambdas, seed) for seed in seeds}
        timing = pipeline.inference_times(bases, memdecs[seeds[0]], store,
                                          splits["domain"][0][:cfg.timing_windows].to(device),
                                          data.vocab_size, cfg.knn.k, cfg.knn.temperature)

    def log_sweeps(run: track.Run, entry: dict) -> None:
        for split, sweep in entry.items():
            run.log_history(f"{split}_perplexity_by_lambda_index", range(len(sweep)), list(sweep.values()))

    for name in results[seeds[0]]:
        size, variant = name.split("/")
        entries = {seed: results[seed][name] for seed in seeds}
        with ctx.child(name, params={"base": size, "variant": variant, "lambdas": cfg.lambdas}) as run:
            log_sweeps(run, mean_sweep(list(entries.values())))
            if variant == "memdec":
                for seed, entry in entries.items():
                    with ctx.child(f"{name}/seed{seed}", params={"seed": seed}, parent=run) as seed_run:
                        log_sweeps(seed_run, entry)
    return {"results": results, "timing": timing}


@task(name="memory_decoder-report", cache_policy=NO_CACHE)
def report(cfg: MemoryDecoderConfig, bases: dict, datastore: dict, memdecs: dict[int, dict], evaluation: dict,
           ctx: track.RunContext) -> Report:
    """The comparison per base size (a MemDec's row the mean over its seeds) with the claims, the
    λ sweeps, and the figures (PNG, and CSV for `dvc plots`)."""
    metrics = method_metrics(cfg, bases, datastore, memdecs, evaluation, ctx.profile)
    return Report(metrics, plots.write_all(metrics, plots_dir(METHOD)))
