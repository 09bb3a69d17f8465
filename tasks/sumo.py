"""Tasks of the SUMO flow: the theory check, one training task per (optimizer, lr), the step-time
measurement, then publishing the comparison."""
from __future__ import annotations

import sys
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.io import write_json
from paperline.methods.sumo import plots
from paperline.methods.sumo.config import SumoConfig
from paperline.methods.sumo.data import digits_file, load_digits_split
from paperline.methods.sumo.summary import lr_table, summarize
from paperline.methods.sumo.theory import kappa_label, ns_error_vs_condition_number
from paperline.methods.sumo.train import digits_step_times, train_one
from tasks import track
from tasks.paths import metrics_path, models_dir, plots_dir, project_path, run_pointer_path
from tasks.runners import GPU_TAG, gpu_slot

METHOD = "sumo"


def variant_name(optimizer: str, lr: float) -> str:
    return f"{optimizer}_lr{lr:g}"


def data_version(cfg: SumoConfig) -> str:
    """digits: sha256 of the data file. C4: sha256 of the shards' names and sizes (hundreds of GB
    are not hashed) and of the tokenizer file."""
    if cfg.task == "digits_mlp":
        return track.data_version([digits_file()])
    import hashlib

    from paperline.data.c4 import c4_shards

    digest = hashlib.sha256()
    for split in ("train", "validation"):
        for shard in c4_shards(cfg.lm.c4_dir, split):
            digest.update(f"{shard.name}:{shard.stat().st_size}".encode())
    tokenizer = Path(cfg.lm.tokenizer)
    if not tokenizer.is_file():
        raise FileNotFoundError(f"{tokenizer}: no such tokenizer file (sumo lm.tokenizer: a tokenizer.json)")
    digest.update(tokenizer.read_bytes())
    return "c4-sha256:" + digest.hexdigest()[:16]


def with_resolved_paths(cfg: SumoConfig) -> SumoConfig:
    """Relative lm.c4_dir / lm.tokenizer are relative to the project root (where params.yaml is)."""
    if cfg.lm is None:
        return cfg
    paths = {}
    for key in ("c4_dir", "tokenizer"):
        paths[key] = str(project_path(getattr(cfg.lm, key)))
    return cfg.model_copy(update={"lm": cfg.lm.model_copy(update=paths)})


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
@task(name="sumo-theory", cache_policy=NO_CACHE)
def theory(cfg: SumoConfig, parent: track.Run) -> dict:
    """Newton–Schulz vs exact SVD against κ: pure linear algebra on small matrices (a CPU task)."""
    rows = ns_error_vs_condition_number(cfg)
    for key, values in rows.items():
        if isinstance(values, list) and key != "kappa":
            parent.log_metrics({f"theory/{key}/kappa_{kappa_label(kappa)}": v for kappa, v in zip(rows["kappa"], values)})
    return rows


@task(name="sumo-train", tags=[GPU_TAG], cache_policy=NO_CACHE)
def train_variant(cfg: SumoConfig, optimizer: str, lr: float, parent: track.Run, profile: str,
                  data: str) -> list[dict]:
    """Every seed of one (optimizer, lr): one MLflow child run, a checkpoint per seed."""
    import torch

    torch.set_num_threads(1)  # small matmuls; the flow's other task runs beside this one
    variant = variant_name(optimizer, lr)
    results = []
    with gpu_slot() as device, track.child_run(parent, METHOD, variant, profile, data,
                                               params={"optimizer": optimizer, "lr": lr,
                                                       "device": str(device)}) as run:
        if cfg.task == "digits_mlp":
            digits = load_digits_split(cfg.test_fraction, cfg.split_seed).to(device)
        for s in range(cfg.seeds):
            checkpoint = models_dir(METHOD) / variant / f"seed{s}.pt"
            if cfg.task == "digits_mlp":
                result = train_one(cfg, digits, optimizer, lr, s, device, checkpoint_path=checkpoint,
                                   progress=sys.stderr.isatty())
            else:
                from paperline.methods.sumo.lm import train_lm

                result = train_lm(cfg, optimizer, lr, s, device, checkpoint_path=checkpoint,
                                  progress=sys.stderr.isatty())
            for history in (result["history"], result.get("eval_history", {})):
                for key, values in history.items():
                    if key != "step":
                        run.log_history(f"{key}/seed{s}", history["step"], values)
            run.log_metrics({f"seed{s}/{k}": v for k, v in result.items()
                             if isinstance(v, (int, float)) and k not in ("lr", "seed_index")})
            results.append(result)
        run.log_artifact(models_dir(METHOD) / variant / "seed0.pt", "checkpoints")
        entry = lr_table(results)[optimizer][lr]
        run.log_metrics({k: v for k, v in entry.items() if isinstance(v, (int, float))})
    return results


@task(name="sumo-step-time", tags=[GPU_TAG], cache_policy=NO_CACHE)
def step_time(cfg: SumoConfig, parent: track.Run, profile: str, data: str) -> dict:
    """Step time and state bytes of every optimizer against AdamW, round-robin in this one task."""
    import torch

    torch.set_num_threads(1)  # as the training tasks, so times compare with theirs
    with gpu_slot() as device, track.child_run(parent, METHOD, "step_time", profile, data,
                                               params={"device": str(device), "rounds": cfg.timing_rounds,
                                                       "steps": cfg.timing_steps}) as run:
        if cfg.task == "digits_mlp":
            times = digits_step_times(cfg, load_digits_split(cfg.test_fraction, cfg.split_seed).to(device), device)
        else:
            from paperline.methods.sumo.lm import llama_step_times

            times = llama_step_times(cfg, device)
        run.log_metrics({f"{name}/{k}": v for name, row in times.items() for k, v in row.items()})
    return times


@task(name="sumo-publish", cache_policy=NO_CACHE)
def publish(cfg: SumoConfig, runs: list[dict], theory_rows: dict, times: dict, parent: track.Run) -> dict:
    """metrics/sumo.json, the plots (PNG for MLflow and DVC, CSV for `dvc plots`), mlflow_run.json."""
    summary = summarize(runs, theory_rows, times, list(cfg.optimizers))
    out = plots_dir(METHOD)
    if cfg.task == "digits_mlp":
        curve_labels = {}
    else:
        curve_labels = {"title": f"LLaMA-{cfg.lm.model_size} on C4", "ylabel": "training loss (minibatch mean)"}
    paths = [plots.plot_loss_curves(runs, summary, out / "loss_curves.png", **curve_labels),
             plots.plot_lr_sweep(lr_table(runs), out / "lr_sweep.png"),
             plots.plot_ns_error(theory_rows, out / "ns_error_vs_kappa.png"),
             plots.plot_cost(summary, out / "state_and_step_time.png")]
    paths += plots.write_plot_tables(runs, summary, theory_rows, out)
    for path in paths:
        parent.log_artifact(path, "plots")
    parent.log_metrics({f"{name}/{k}": v for name, row in summary.items() if isinstance(row, dict)
                        for k, v in row.items() if isinstance(v, (int, float))})
    parent.log_metrics({k: v for k, v in summary.items() if isinstance(v, (int, float))})
    write_json(metrics_path(METHOD), summary)
    write_json(run_pointer_path(METHOD), track.run_pointer(parent, METHOD))
    return summary
