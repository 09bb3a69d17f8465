"""Tasks of the GeoAda flow: the data (the nbody stage's folder, built when missing), the base's
pretraining (one MLflow child, resumable) and its original-task figures at every seed's sampling
noise, one task per control type and fine-tuning seed running every variant (fine-tune and measure;
an MLflow child per row, `<control>_<variant>`, with a run per seed nested under it, resumable from
its checkpoint), then the report (each row the mean over seeds, the claims from the per-seed rows)."""
from __future__ import annotations

import sys
from dataclasses import dataclass

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.config import read_params
from paperline.data.nbody import RECORD_FILE, NBodyConfig, NBodyError
from paperline.io import atomic_path, json_digest, read_json
from paperline.methods.geoada import plots
from paperline.methods.geoada.config import GeoAdaConfig
from paperline.methods.geoada.summary import method_metrics, row_name
from tasks import nbody_prep, track
from tasks.paths import params_path, plots_dir
from tasks.publish import Report
from tasks.runners import GPU_TAG
from tasks.unit import unit

METHOD = "geoada"
BASE_FILE = "base.pt"


@dataclass(frozen=True)
class NBodyData:
    folder: str  # the nbody stage's output
    fingerprint: str  # of the parameters it was built from
    record: dict
    version: str


def data_config(profile: str | None) -> NBodyConfig:
    """nbody at the profile this run uses (`geoada.profile` unless given)."""
    return nbody_prep.resolve(read_params(params_path()), profile)[1]


def data(cfg: GeoAdaConfig, data_cfg: NBodyConfig) -> NBodyData:
    """The trajectories, checked (a wrong shape, a NaN, too few frames or a missing split fail here,
    naming the file and field, before the run starts), versioned by content."""
    from paperline.methods.geoada.experiment import task_windows

    folder = nbody_prep.ensure(data_cfg)
    record = read_json(folder / RECORD_FILE)
    holds = {"simulate": ("charged",), "md17": ("md17",), "both": ("charged", "md17")}[data_cfg.source]
    if cfg.dataset not in holds:
        raise NBodyError(f"{folder}: geoada dataset {cfg.dataset!r}: nbody source {data_cfg.source!r} holds "
                         f"{' and '.join(holds)} only")
    task_windows(folder, cfg)
    files = sorted(p for p in folder.iterdir() if p.suffix in (".npy", ".json"))
    return NBodyData(str(folder), record["fingerprint"], record, track.data_version(files))


def _fingerprint(cfg: GeoAdaConfig, source: NBodyData, *parts: str) -> str:
    return json_digest([cfg.model_dump(), source.fingerprint, *parts])


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
@task(name="geoada-pretrain", tags=[GPU_TAG], cache_policy=NO_CACHE)
def pretrain(cfg: GeoAdaConfig, source: NBodyData, ctx: track.RunContext) -> dict:
    """The base EGTN on frame-conditioned forecasting (cond_frames → horizon), saved to
    models/geoada/base.pt, and its original-task ADE/FDE at each fine-tuning seed's sampling noise
    (child run `base`)."""
    import torch

    from paperline.methods.geoada.experiment import evaluate_base, pretrain_base, task_windows

    with unit(ctx, "base", threads=cfg.threads) as u:
        run, folder = u.run, u.models
        windows = task_windows(source.folder, cfg)
        base, result = pretrain_base(cfg, windows, folder / "base_train.pt", _fingerprint(cfg, source, "base"),
                                     progress=sys.stderr.isatty(), device=u.device)
        with atomic_path(folder / BASE_FILE) as tmp:  # the adapters' tasks read it
            torch.save(base.state_dict(), tmp)
        original = {seed: evaluate_base(cfg, base, windows, seed, u.device) for seed in cfg.run_seeds()}
        run.log_history("loss", result.steps, result.loss)
        run.log_metrics({f"seed{seed}/original_{k}": v for seed, o in original.items() for k, v in o.items()}
                        | {f"original_{k}": v for k, v in original[cfg.run_seeds()[0]].items()}
                        | {"train_seconds": result.seconds})
    return {"path": str(folder / BASE_FILE), "original_task": original, "trainable": result.trainable,
            "train_seconds": result.seconds, "final_loss": result.loss[-1] if result.loss else None}


def variant_runs(cfg: GeoAdaConfig, ctx: track.RunContext):
    """A child run per row (control × variant), open while its seeds train (each seed's run nested
    under it); the row, the mean over seeds, lands on it when the flow publishes."""
    return ctx.children({row_name(c, v): {"control": c, "variant": v, "seeds": cfg.run_seeds()} for c, v in cfg.pairs})


@task(name="geoada-finetune", tags=[GPU_TAG], cache_policy=NO_CACHE)
def finetune(cfg: GeoAdaConfig, control: str, seed: int, source: NBodyData, base: dict, ctx: track.RunContext,
             runs: dict[str, track.Run], swept: list[dict] | None = None) -> list[dict]:
    """Every variant that fits the control type on it at one fine-tuning seed (one task: a `gpu`
    slot request costs ~1.5 s, a tiny variant less), each fine-tuned from the base and measured on
    the new and the original task; its figures on the MLflow run `<control>_<variant>/seed<seed>`
    nested under the row's run, the training and validation losses as histories. `swept`: the
    first seed's results on this control, each variant then training at the rate its sweep chose;
    None: this is the sweep (cfg.learning_rates, extended past an edge by the same rule for every
    variant, each variant keeping its best on the validation set)."""
    from paperline.methods.geoada.experiment import control_variants, finetune_from_base, task_windows

    results = []
    with unit(ctx, threads=cfg.threads) as u:  # one slot for all the variants; a run per variant below
        windows = task_windows(source.folder, cfg)
        for variant in control_variants(cfg, control):
            name = row_name(control, variant)
            with ctx.child(f"{name}/seed{seed}", params={"control": control, "variant": variant, "seed": seed,
                                                         "device": str(u.device)}, parent=runs[name]) as run:
                result = finetune_from_base(cfg, base["path"], control, variant, windows,
                                            u.models / name / f"seed{seed}" / "train.pt",
                                            _fingerprint(cfg, source, control, variant, str(seed)), seed, swept,
                                            progress=sys.stderr.isatty(), device=u.device)
                if result.steps:
                    run.log_history("loss", result.steps, result.loss)
                if result.validation_curve:
                    run.log_history("validation_loss", result.steps, result.validation_curve)
                run.log_final(result.final_metrics())
            results.append(result.as_dict())
    return results


@task(name="geoada-report", cache_policy=NO_CACHE)
def report(cfg: GeoAdaConfig, results: list[dict], base: dict, source: NBodyData, ctx: track.RunContext) -> Report:
    metrics = method_metrics(cfg, results, base, ctx.profile, source.record)
    return Report(metrics, plots.write_all(cfg, metrics.rows, metrics.details["loss_curves"], plots_dir(METHOD)))
