"""Tasks of the QFFT flow: the problem sets (generated chain sums, or S1K/LIMO JSONL), the
short-CoT base model (trained here at smoke, an HF model by path at paper scale), the four
fine-tunes from it — SFT on [question; long response] with loss on the response, QFFT on the
response alone, and both under noise level IV (questions paired with other questions'
responses), one budget for all — each evaluated on the same questions, then the report:
accuracy, length and long-CoT rate on easy/hard questions (solvable or not by the base), RAK, AES."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.methods.qfft import pipeline, plots
from paperline.methods.qfft.config import QFFTConfig
from paperline.methods.qfft.pipeline import QFFTData
from paperline.methods.qfft.summary import method_metrics
from tasks import track
from tasks.paths import models_dir, plots_dir
from tasks.publish import Report
from paperline.train.distributed import DistributedConfig
from tasks.runners import GPU_TAG, gpu_devices

METHOD = "qfft"


def data(cfg: QFFTConfig) -> QFFTData:
    """The example sets made, or read and validated, before the run starts (a malformed JSONL line
    fails here); versioned by the contents of the real JSONL files."""
    checked = pipeline.check_example_sets(cfg, models_dir(METHOD) / "data")
    return dataclasses.replace(checked, version=track.data_version(checked.sources))


def _hf_dir(name: str) -> Path:
    return models_dir(METHOD) / name / "hf"


def _train(model, tok, examples, with_question: bool, t, cfg: QFFTConfig, name: str, data: QFFTData, devices, run,
           fingerprint: dict, distributed: DistributedConfig) -> dict:
    """Train on `examples` under the budget `t` over `devices`, the loop's figures onto `run`."""
    settings = pipeline.train_settings(t, cfg, len(examples))
    return pipeline.train_on_examples(model, tok, examples, with_question, settings, devices[0],
                                      models_dir(METHOD) / name / "checkpoint.pt",
                                      {"data": data.version, **fingerprint}, name,
                                      on_log=lambda step, m: run.log_metrics(m, step), distributed=distributed,
                                      device_indices=[d.index for d in devices])


def _evaluate(model, tok, cfg: QFFTConfig, data: QFFTData, name: str, device) -> list[dict]:
    return pipeline.evaluate_model(model, tok, cfg, data, device, models_dir(METHOD) / name / "responses.jsonl")


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
@task(name="qfft-example-sets", cache_policy=NO_CACHE)
def example_sets(cfg: QFFTConfig, data: QFFTData) -> Path:
    """The example sets as JSONL under models/qfft/data (the training and evaluation tasks read them)."""
    return pipeline.write_example_sets(cfg, data)


@task(name="qfft-base", tags=[GPU_TAG], cache_policy=NO_CACHE)
def train_base(cfg: QFFTConfig, data: QFFTData, ctx: track.RunContext,
               distributed: DistributedConfig = DistributedConfig()) -> dict:
    """The short-CoT reference M_S: trained on terse solutions ([question; response], loss on the
    response), or the HF model at `base_model_path`; then evaluated (its correctness defines the
    easy and hard questions)."""
    import torch

    from paperline.methods.qfft.hf import load_causal_lm

    torch.set_num_threads(cfg.threads)
    tok = pipeline.tokenizer(cfg)
    with gpu_devices(distributed.devices) as devices, ctx.child(
            "base", params={"shape": cfg.base.model_dump(), "train": cfg.base_train.model_dump(),
                            "model_path": cfg.base_model_path, "device": ",".join(map(str, devices)),
                            "distributed": distributed.model_dump()}) as run:
        device = devices[0]
        train: dict = {}
        if cfg.base_model_path:
            model = load_causal_lm(cfg.base_model_path).to(device)
        else:
            torch.manual_seed(cfg.seed)
            model = pipeline.base_model(cfg, tok)
            examples = pipeline.read_examples(data.path("base_train"))
            result = _train(model, tok, examples, True, cfg.base_train, cfg, "base", data, devices, run,
                            {"variant": "base"}, distributed)
            model.cpu().save_pretrained(_hf_dir("base"))
            tok.save(_hf_dir("base"))
            train = {"val_loss": result["val_loss"], "train_time_s": result["train_time_s"]}
        samples = _evaluate(model, tok, cfg, data, "base", device)
    return {"samples": samples, "train": train}  # the row, published on this run, has the fit's figures


@task(name="qfft-first-pass", tags=[GPU_TAG], cache_policy=NO_CACHE)
def first_pass_sets(cfg: QFFTConfig, data: QFFTData, distributed: DistributedConfig = DistributedConfig()) -> Path:
    """`problems.first_pass: base`: the fine-tuning sets written from the trained base's own greedy
    answers to the fine-tuning questions (kept where right, else followed by "Wait, recheck:")."""
    import torch

    from paperline.methods.qfft.hf import load_causal_lm

    torch.set_num_threads(cfg.threads)
    tok = pipeline.tokenizer(cfg)
    with gpu_devices(distributed.devices) as devices:
        model = load_causal_lm(_hf_dir("base")).to(devices[0])
        first_passes = pipeline.base_first_passes(model, tok, cfg, devices[0])
    return pipeline.write_example_sets(cfg, data, first_passes)


@task(name="qfft-finetune", tags=[GPU_TAG], cache_policy=NO_CACHE)
def finetune_variant(cfg: QFFTConfig, variant: str, data: QFFTData, ctx: track.RunContext,
                     distributed: DistributedConfig = DistributedConfig()) -> dict:
    """One fine-tune of the base: `sft*` on [question; response] (loss on the response), `qfft*`
    on the response alone (no question, no template: spec §b); `*_noise_iv` on the shuffled
    pairs. Same settings, same seed for all four."""
    import torch

    from paperline.methods.qfft.hf import add_lora, load_causal_lm, merged, trainable, unwrap

    torch.set_num_threads(cfg.threads)
    tok = pipeline.tokenizer(cfg)
    with_question = variant.startswith("sft")
    source = "finetune_noise_iv" if variant.endswith("noise_iv") else "finetune"
    with gpu_devices(distributed.devices) as devices, ctx.child(
            variant, params={"train": cfg.finetune.model_dump(), "with_question": with_question, "data": source,
                             "first_pass": cfg.problems.first_pass,
                             "device": ",".join(map(str, devices)), "distributed": distributed.model_dump()}) as run:
        device = devices[0]
        base_dir = cfg.base_model_path or str(_hf_dir("base"))
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
        model.save_pretrained(_hf_dir(variant))
        tok.save(_hf_dir(variant))
        samples = _evaluate(model, tok, cfg, data, variant, device)
    return {"samples": samples, "train": {"val_loss": result["val_loss"], "train_time_s": result["train_time_s"]}}


@task(name="qfft-report", cache_policy=NO_CACHE)
def report(base: dict, variants: dict[str, dict], ctx: track.RunContext) -> Report:
    """The comparison against SFT, and the figures (PNG, and CSV for `dvc plots`)."""
    metrics = method_metrics(base, variants, ctx.profile)
    return Report(metrics, plots.write_all(metrics, plots_dir(METHOD)))
