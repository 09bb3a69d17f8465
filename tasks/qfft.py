"""Tasks of the QFFT flow, each training task for one seed (`seeds`): the problem sets (generated
chain sums, or S1K/LIMO JSONL), the short-CoT base model (trained here at smoke, an HF model by
path at paper scale), the four fine-tunes from it — SFT on [question; long response] with loss on
the response, QFFT on the response alone, and both under noise level IV (questions paired with
other questions' responses), one budget for all — each evaluated on the same questions, then the
report: accuracy, length and long-CoT rate on easy/hard questions (solvable or not by the base),
RAK, AES, means and spreads over the seeds."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.io import atomic_dir
from paperline.methods.qfft import pipeline, plots
from paperline.methods.qfft.config import QFFTConfig
from paperline.methods.qfft.pipeline import QFFTData
from paperline.methods.qfft.summary import method_metrics
from paperline.train.distributed import DistributedConfig
from tasks import track
from tasks.paths import models_dir, plots_dir
from tasks.publish import Report
from tasks.runners import GPU_TAG, gpu_devices
from tasks.unit import set_threads, unit

METHOD = "qfft"
VARIANTS = pipeline.VARIANTS  # the four fine-tunes, in the flow's order (flows never import the library)


def data(cfg: QFFTConfig) -> QFFTData:
    """The example sets made, or read and validated, before the run starts (a malformed JSONL line
    fails here); versioned by the contents of the real JSONL files."""
    checked = pipeline.check_example_sets(cfg, models_dir(METHOD) / "data")
    return dataclasses.replace(checked, version=track.data_version(checked.sources))


def _dir(name: str, seed: int) -> Path:
    """A model's folder (checkpoint, HF model, responses), one per training seed."""
    return models_dir(METHOD) / name / f"seed{seed}"


def _hf_dir(name: str, seed: int) -> Path:
    return _dir(name, seed) / "hf"


def seeded(cfg: QFFTConfig, seed: int) -> QFFTConfig:
    """The config one seed's trainings run under (`seed` drives init, batch order and sampling)."""
    return cfg.model_copy(update={"seed": seed})


def _train(model, tok, examples, with_question: bool, t, cfg: QFFTConfig, name: str, data: QFFTData, devices, run,
           fingerprint: dict, distributed: DistributedConfig) -> dict:
    """Train on `examples` under the budget `t` over `devices`, the loop's figures onto `run`."""
    settings = pipeline.train_settings(t, cfg, len(examples))
    return pipeline.train_on_examples(model, tok, examples, with_question, settings, devices[0],
                                      _dir(name, cfg.seed) / "checkpoint.pt",
                                      {"data": data.version, "seed": cfg.seed, **fingerprint}, f"{name} seed {cfg.seed}",
                                      on_log=lambda step, m: run.log_metrics(m, step), distributed=distributed,
                                      device_indices=[d.index for d in devices], qfft_end=cfg.qfft_end)


def _evaluate(model, tok, cfg: QFFTConfig, data: QFFTData, name: str, device) -> list[dict]:
    return pipeline.evaluate_model(model, tok, cfg, data, device, _dir(name, cfg.seed) / "responses.jsonl")


def _result(samples: list[dict], train: dict, run) -> dict:
    """What the report reads: the scored responses, the fit's figures, and the seed's MLflow run
    (its row lands there)."""
    return {"samples": samples, "train": train, "run": run}


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
@task(name="qfft-example-sets", cache_policy=NO_CACHE)
def example_sets(cfg: QFFTConfig, data: QFFTData) -> Path:
    """The example sets as JSONL under models/qfft/data (the training and evaluation tasks read them)."""
    return pipeline.write_example_sets(cfg, data)


@task(name="qfft-base", tags=[GPU_TAG], cache_policy=NO_CACHE)
def train_base(cfg: QFFTConfig, data: QFFTData, ctx: track.RunContext, parent: track.Run,
               distributed: DistributedConfig = DistributedConfig()) -> dict:
    """The short-CoT reference M_S of one seed (`cfg.seed`, a run under the model's run `parent`):
    trained on terse solutions ([question; response], loss on the response), or the HF model at
    `base_model_path`; then evaluated (its correctness defines the easy and hard questions)."""
    from paperline.train.lm_base import load_causal_lm

    tok = pipeline.tokenizer(cfg)
    with unit(ctx, f"base_s{cfg.seed}", {"seed": cfg.seed, "init": cfg.base_init, "shape": cfg.base.model_dump(),
                                         "train": cfg.base_train.model_dump(), "model_path": cfg.base_model_path,
                                         "distributed": distributed.model_dump()},
              threads=cfg.threads, parent=parent, devices=distributed.devices) as u:
        run, device, devices = u.run, u.device, u.devices
        train: dict = {}
        if cfg.base_model_path:
            model = load_causal_lm(cfg.base_model_path).to(device)
        else:
            model = pipeline.base_model(cfg, tok)
            examples = pipeline.read_examples(data.path("base_train"))
            result = _train(model, tok, examples, True, cfg.base_train, cfg, "base", data, devices, run,
                            {"variant": "base", "init": cfg.base_init}, distributed)
            with atomic_dir(_hf_dir("base", cfg.seed)) as hf:  # a kill mid-save leaves no half folder
                model.cpu().save_pretrained(hf)
                tok.save(hf)
            train = {"val_loss": result["val_loss"], "train_time_s": result["train_time_s"]}
        samples = _evaluate(model, tok, cfg, data, "base", device)
    return _result(samples, train, run)  # the report logs the seed's row, the fit's figures in it, on `run`


@task(name="qfft-first-pass", tags=[GPU_TAG], cache_policy=NO_CACHE)
def first_pass_sets(cfg: QFFTConfig, data: QFFTData, distributed: DistributedConfig = DistributedConfig()) -> QFFTData:
    """`problems.first_pass: base`: the example sets of one seed (`data/seed<S>/`), the fine-tuning
    sets written from that seed's trained base's own greedy answers to the fine-tuning questions
    (kept where right, else followed by "Wait, recheck:"). No run of its own (so no RunContext):
    the prologue's two parts by hand."""
    from paperline.train.lm_base import load_causal_lm

    set_threads(cfg.threads)
    tok = pipeline.tokenizer(cfg)
    with gpu_devices(distributed.devices) as devices:
        model = load_causal_lm(_hf_dir("base", cfg.seed)).to(devices[0])
        first_passes = pipeline.base_first_passes(model, tok, cfg, devices[0])
    own = dataclasses.replace(data, folder=str(Path(data.folder) / f"seed{cfg.seed}"))
    pipeline.write_example_sets(cfg, own, first_passes)
    return own


@task(name="qfft-finetune", tags=[GPU_TAG], cache_policy=NO_CACHE)
def finetune_variant(cfg: QFFTConfig, variant: str, data: QFFTData, ctx: track.RunContext, parent: track.Run,
                     distributed: DistributedConfig = DistributedConfig()) -> dict:
    """One fine-tune of the base of `cfg.seed` (a run under the variant's run `parent`): `sft*` on
    [question; response] (loss on the response), `qfft*` on the response alone (no question, no
    template: spec §b); `*_noise_iv` on the shuffled pairs. Same settings, same seed for all four."""
    from paperline.methods.qfft.hf import add_lora, merged, trainable, unwrap
    from paperline.train.lm_base import load_causal_lm

    tok = pipeline.tokenizer(cfg)
    with_question = variant.startswith("sft")
    source = "finetune_noise_iv" if variant.endswith("noise_iv") else "finetune"
    with unit(ctx, f"{variant}_s{cfg.seed}", {"seed": cfg.seed, "train": cfg.finetune.model_dump(),
                                              "with_question": with_question, "data": source,
                                              "first_pass": cfg.problems.first_pass,
                                              "distributed": distributed.model_dump()},
              threads=cfg.threads, parent=parent, devices=distributed.devices) as u:
        run, device, devices = u.run, u.device, u.devices
        base_dir = cfg.base_model_path or str(_hf_dir("base", cfg.seed))
        model = load_causal_lm(base_dir)
        lora = cfg.finetune.lora
        if lora is not None:  # the base frozen, only the adapters train (the same seed's A for all four)
            model = add_lora(model, lora, cfg.seed)
        model = trainable(model).train()
        examples = pipeline.read_examples(data.path(source))
        result = _train(model, tok, examples, with_question, cfg.finetune, cfg, variant, data, devices, run,
                        {"variant": variant, "base": base_dir, "lora": lora and lora.model_dump(),
                         "first_pass": cfg.problems.first_pass}, distributed)
        model = merged(unwrap(model))
        with atomic_dir(_hf_dir(variant, cfg.seed)) as hf:  # a kill mid-save leaves no half folder
            model.save_pretrained(hf)
            tok.save(hf)
        samples = _evaluate(model, tok, cfg, data, variant, device)
    return _result(samples, {"val_loss": result["val_loss"], "train_time_s": result["train_time_s"]}, run)


@task(name="qfft-report", cache_policy=NO_CACHE)
def report(by_seed: dict[int, dict], ctx: track.RunContext) -> Report:
    """The comparison against SFT (means over the seeds; each seed's row logged on that seed's
    run, the means land on the models' runs when the flow publishes), and the figures (PNG, and
    CSV for `dvc plots`). `by_seed`: seed -> {"base": result, "variants": {variant: result}}."""
    from paperline.metrics import numeric

    metrics = method_metrics(by_seed, ctx.profile)
    for seed, results in by_seed.items():
        for name, result in ({"base": results["base"]} | results["variants"]).items():
            result["run"].log_final(numeric(metrics.tables["seeds"][f"{name}_s{seed}"]))
    return Report(metrics, plots.write_all(metrics, plots_dir(METHOD)))
