"""Tasks of the NGN-M flow: sweep one (problem, optimizer) over c × seeds, then publish."""
from __future__ import annotations

import sys
import time
from importlib import resources
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.config import ParamsError
from paperline.io import write_json
from paperline.methods.ngn_m import plots
from paperline.methods.ngn_m.config import NGNMConfig
from paperline.methods.ngn_m.optimizers import NGN_FAMILY
from paperline.methods.ngn_m.problems import PRIMARY_METRIC
from paperline.methods.ngn_m.summary import band_decades, seed_mean, summarize
from paperline.methods.ngn_m.sweep import VariantResult, resolve_data_dir, run_variant
from tasks import track
from tasks.paths import metrics_path, models_dir, params_path, plots_dir, repo_root, run_pointer_path
from tasks.runners import GPU_TAG, gpu_slot

METHOD = "ngn_m"
MLFLOW_TRACE_POINTS = 500  # a γ_k / loss curve is thinned to at most this many MLflow points
# the files scikit-learn's load_diabetes / load_digits read (shipped inside the package)
SKLEARN_FILES = {"least_squares": ["diabetes_data_raw.csv.gz", "diabetes_target.csv.gz"],
                 "digits": ["digits.csv.gz"]}
REAL_DATA_FILES = {"cifar10": ["data_batch_1", "test_batch"], "cifar100": ["train", "test"],
                   "text_lm": ["train.bin", "val.bin"]}


def variant_name(problem: str, optimizer: str) -> str:
    return f"{problem}-{optimizer}"


def c_tag(c: float) -> str:
    """c as an MLflow-safe key part: 1.0e-03, 3.2e01."""
    return f"{c:.1e}".replace("+", "")


def check_data(cfg: NGNMConfig) -> None:
    """The real-data problems' directories hold their files: fail before any work otherwise."""
    where = f"{params_path().name}: {METHOD}"
    for name, pcfg in cfg.problems.items():
        if not hasattr(pcfg, "data_dir"):
            continue
        directory = resolve_data_dir(pcfg.data_dir, repo_root())
        files = REAL_DATA_FILES[pcfg.dataset if pcfg.kind == "cifar" else pcfg.kind]
        missing = [f for f in files if not (directory / f).is_file()]
        if missing:
            hint = ("the CIFAR python version (cifar-10-batches-py/ or cifar-100-python/)" if pcfg.kind == "cifar"
                    else "token files in nanoGPT's format (prepare.py writes train.bin and val.bin)")
            raise ParamsError(f"{where}.problems.{name}.data_dir: {directory} lacks {', '.join(missing)}; "
                              f"point it at {hint}")


def data_version(cfg: NGNMConfig) -> str:
    """sha256 over the files the problems read: scikit-learn's bundled CSVs and the CIFAR batches;
    for LM token files (often many GB) their names and sizes."""
    paths: list[Path] = []
    sizes = []
    for pcfg in cfg.problems.values():
        if pcfg.kind in SKLEARN_FILES:
            base = resources.files("sklearn.datasets") / "data"
            paths += [Path(str(base / f)) for f in SKLEARN_FILES[pcfg.kind]]
        elif pcfg.kind == "cifar":
            paths.append(resolve_data_dir(pcfg.data_dir, repo_root()))
        elif pcfg.kind == "text_lm":
            directory = resolve_data_dir(pcfg.data_dir, repo_root())
            sizes += [f"{f}:{(directory / f).stat().st_size}" for f in REAL_DATA_FILES["text_lm"]]
    version = track.data_version(paths)
    return version + ("+" + ",".join(sizes) if sizes else "")


def _thin(steps: list[int], values: list, points: int = MLFLOW_TRACE_POINTS) -> tuple[list[int], list[float]]:
    keep = [(s, v) for s, v in zip(steps, values) if v is not None]
    stride = max(1, len(keep) // points)
    keep = keep[::stride]
    return [s for s, _ in keep], [float(v) for _, v in keep]


def _variant_curves(result: VariantResult, optimizer: str, kind: str) -> dict[str, tuple[list, list]]:
    """MLflow curves of one variant: final metrics against the c index, and the first seed's
    minibatch loss and γ_k against the step at every c."""
    index = list(range(len(result.c_values)))
    curves = {"diverged_seeds_by_c_index": (index, [int(n) for n in result.diverged()])}
    for m in dict.fromkeys(["loss", PRIMARY_METRIC[kind][0]]):
        curves[f"final_{m}_by_c_index"] = (index, [float(x) for x in seed_mean(result, m)])
    for r in result.first_seed_runs():
        curves[f"train_loss/c_{c_tag(r.c)}"] = _thin(r.trace_steps, r.loss)
        if optimizer in NGN_FAMILY:
            curves[f"gamma/c_{c_tag(r.c)}"] = _thin(r.trace_steps, r.gamma)
    return curves


def _log_curves(run: track.Run, curves: dict[str, tuple[list, list]]) -> None:
    """All curves in as few MLflow calls as the batch limit allows (one SQLite write each)."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    items = [Metric(key, float(v), now, int(s)) for key, (steps, values) in curves.items()
             for s, v in zip(steps, values)]
    for i in range(0, len(items), track.STEP_BATCH):
        track.client().log_batch(run.run_id, metrics=items[i:i + track.STEP_BATCH])


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
@task(name="ngn_m-sweep", tags=[GPU_TAG], cache_policy=NO_CACHE)
def sweep(cfg: NGNMConfig, problem: str, optimizer: str, parent: track.Run, profile: str,
          data: str) -> VariantResult:
    """Every c × seed of one (problem, optimizer): one MLflow child run."""
    import torch

    torch.set_num_threads(1)  # tiny models: threads cost more than they give
    variant = variant_name(problem, optimizer)
    pcfg = cfg.problems[problem]
    params = {"problem": problem, "optimizer": optimizer, "seeds": cfg.seeds_for(problem),
              "c_values": cfg.c_values_for(problem), "momentum": cfg.momentum, "betas": cfg.betas,
              "eps": cfg.eps, "weight_decay": cfg.weight_decay, problem: pcfg.model_dump()}
    with gpu_slot() as device, track.child_run(parent, METHOD, variant, profile, data,
                                               params=params | {"device": str(device)}) as run:
        result = run_variant(cfg, problem, optimizer, models_dir(METHOD) / variant, root=repo_root(),
                             device=device, progress=sys.stderr.isatty())
        _log_curves(run, _variant_curves(result, optimizer, pcfg.kind))
        metric, higher = PRIMARY_METRIC[pcfg.kind]
        run.log_metrics({f"final_{metric}/c_{c_tag(c)}": float(value)
                         for c, value in zip(result.c_values, seed_mean(result, metric))})
        run.log_metrics(band_decades(result.c_values, seed_mean(result, metric), higher, cfg.band))
        checkpoints = sorted((models_dir(METHOD) / variant).glob("*.pt"))
        for checkpoint in checkpoints:
            run.log_artifact(checkpoint, "checkpoints")
    return result


@task(name="ngn_m-publish", cache_policy=NO_CACHE)
def publish(cfg: NGNMConfig, variants: list[VariantResult], parent: track.Run) -> dict:
    """metrics/ngn_m.json, the plots (PNG for MLflow and DVC, CSV for `dvc plots`), mlflow_run.json."""
    summary = summarize(variants, cfg.band)
    out = plots_dir(METHOD)
    paths = [plots.plot_sweep(variants, out / "final_vs_c.png")]
    gamma = plots.plot_gamma_trace(variants, out / "gamma_trace.png")
    paths += [gamma] if gamma else []
    paths += plots.write_tables(variants, out)
    for path in paths:
        parent.log_artifact(path, "plots")
    parent.log_metrics({f"{row}/{k}": v for row, values in summary.items() if isinstance(values, dict)
                        for k, v in values.items() if isinstance(v, (int, float))})
    write_json(metrics_path(METHOD), summary)
    write_json(run_pointer_path(METHOD), track.run_pointer(parent, METHOD))
    return summary
