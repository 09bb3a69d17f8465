"""Tasks of the LoTA-QAF flow: the data (digits; the lm-base stage's model, built when missing, or a
model directory by path; the text corpus), the float models (the digits MLP trained once), one task
per (task, bit width) quantising and recovering with every method (an MLflow child run per
variant), then the report."""
from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.config import read_params
from paperline.methods.lota_qaf import plots
from paperline.methods.lota_qaf.config import LotaQafConfig
from paperline.methods.lota_qaf.pipeline import LotaData
from paperline.methods.lota_qaf.summary import method_metrics
from tasks import track
from tasks.paths import models_dir, params_path, plots_dir
from tasks.publish import Report
from tasks.runners import GPU_TAG
from tasks.unit import unit

METHOD = "lota_qaf"


def lm_dir(cfg: LotaQafConfig) -> str | None:
    """The LM to quantise: cfg.lm.model_dir (the paper profile's), else the lm-base stage's folder,
    built here when `dvc repro` has not built it."""
    if "lm" not in cfg.tasks:
        return None
    if cfg.lm.model_dir:
        return cfg.lm.model_dir
    from tasks import lm_base

    return str(lm_base.ensure(lm_base.resolve(read_params(params_path()))[1]))


def data(cfg: LotaQafConfig) -> LotaData:
    """Every input checked (a folder that is not a causal LM, a missing target module, a rank above
    a layer's width fail here, before the run starts), versioned by content."""
    from paperline.methods.lota_qaf.pipeline import open_data

    return open_data(cfg, lm_dir(cfg))


def _digits_checkpoint() -> Path:
    return models_dir(METHOD) / "digits_mlp.pt"


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
@task(name="lota_qaf-float", tags=[GPU_TAG], cache_policy=NO_CACHE)
def float_models(cfg: LotaQafConfig, source: LotaData, ctx: track.RunContext) -> dict[str, dict]:
    """The float ceiling of each task (the digits MLP trained here once): a child run each."""
    from paperline.methods.lota_qaf.pipeline import build_task, float_model, score_row

    rows = {}
    with unit(ctx, threads=cfg.threads):  # one slot for every task; a run per task below
        for name in cfg.tasks:
            with ctx.child(f"{name}_float", params={"task": name}) as run:
                model, record = float_model(cfg, name, source, _digits_checkpoint())
                rows[f"{name}_float"] = score_row(build_task(cfg, name, source), model)
                if record:
                    run.log_history("train_loss", range(len(record["epoch_loss"])), record["epoch_loss"])
                    run.log_metrics({"train_seconds": record["train_seconds"]})
                    run.log_artifact(_digits_checkpoint(), "checkpoints")
    return rows


@task(name="lota_qaf-group", tags=[GPU_TAG], cache_policy=NO_CACHE)
def quantize_and_recover(cfg: LotaQafConfig, name: str, bits: int, source: LotaData,
                         ctx: track.RunContext) -> dict:
    """One (task, bit width): the quantised model and each method's recovery and merge at every
    seed, each variant on its own MLflow child run and each seed's recovery nested under it
    (`<variant>/seed<s>`, its per-step loss). A group's result is written to
    models/lota_qaf/<task>_w<bits>.json, a finished-unit record fingerprinted by the config, the
    data's version and the group: a killed run resumes with the groups it had finished, their
    child runs logged again from it (each group is a minute or less of work: no finer checkpoint)."""
    from paperline.methods.lota_qaf.pipeline import run_group
    from paperline.train.records import read_unit, write_unit

    variant_runs: dict[str, track.Run] = {}  # the row's run, made at its first seed

    def on_method(variant: str, s: int, history: list[float]) -> None:
        params = {"task": name, "bits": bits, "quantizer": cfg.quantizer, "method": variant.rsplit("_", 1)[1]}
        if variant not in variant_runs:
            with ctx.child(variant, params=params) as row_run:
                variant_runs[variant] = row_run  # its row lands on it when the flow publishes
        with ctx.child(f"{variant}/seed{s}", params=params | {"seed": s}, parent=variant_runs[variant]) as run:
            run.log_history("train_loss", range(len(history)), history)

    done = models_dir(METHOD) / f"{name}_w{bits}.json"
    settings = {"config": cfg.model_dump(mode="json"), "data": source.version, "task": name, "bits": bits}
    result = read_unit(done, settings)
    if result is not None:
        for variant, per_seed in result["seed_rows"].items():
            for s in range(len(per_seed)):
                on_method(variant, s, result["histories"][variant if s == 0 else f"{variant}/seed{s}"])
    else:
        with unit(ctx, threads=cfg.threads):
            result = run_group(cfg, name, bits, source, _digits_checkpoint(), on_method=on_method)
        write_unit(done, settings, result)
    with ctx.child(f"{name}_w{bits}_quantized", params={"task": name, "bits": bits, "quantizer": cfg.quantizer}):
        pass  # its row lands on it when the flow publishes
    return result


@task(name="lota_qaf-report", cache_policy=NO_CACHE)
def report(cfg: LotaQafConfig, float_rows: dict, groups: list[dict], ctx: track.RunContext) -> Report:
    rows, seed_rows, histories = dict(float_rows), {}, {}
    for group in groups:
        rows |= group["rows"]
        seed_rows |= group["seed_rows"]
        histories |= group["histories"]
    metrics = method_metrics(cfg, rows, seed_rows, histories, ctx.profile)
    return Report(metrics, plots.write_all(metrics, plots_dir(METHOD)))
