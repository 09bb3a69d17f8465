"""Tasks of the LEFF flow: every (α, method) in one Flower simulation (one task: the clients'
wall times mean something only when nothing runs beside them), a child run per (α, method), each
finished run saved so a killed flow resumes at the next; then the report."""
from __future__ import annotations

import json
import os

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.io import atomic_path
from paperline.methods.leff import plots
from paperline.methods.leff.config import LEFFConfig, runs_planned
from paperline.methods.leff.fed import MethodRun, run_federated
from paperline.methods.leff.summary import METHOD, method_metrics, row, row_name
from paperline.train.lm_base import load_causal_lm
from tasks import track
from tasks.paths import models_dir, plots_dir, repo_path
from tasks.publish import Report
from tasks.runners import GPU_TAG, gpu_slot


def data_version(cfg: LEFFConfig) -> str:
    """The corpus's and base model's digest (a missing file fails here, before any work)."""
    return track.data_version([cfg.corpus, cfg.model])


def _saved(cfg: LEFFConfig) -> dict[tuple[str, float], MethodRun]:
    done = {}
    for method, alpha in runs_planned(cfg):
        path = models_dir(METHOD) / row_name(method, alpha, cfg.alphas) / "run.json"
        if path.is_file():
            run = MethodRun.from_dict(json.loads(path.read_text()))
            if len(run.rounds) == cfg.rounds:
                done[(method, alpha)] = run
    return done


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
@task(name="leff-train", tags=[GPU_TAG], cache_policy=NO_CACHE)
def train_all(cfg: LEFFConfig, ctx: track.RunContext) -> dict[tuple[str, float], MethodRun]:
    """CPU only: the slot keeps the simulation alone."""
    os.environ.setdefault("FLWR_HOME", str(repo_path(".flwr")))  # project-local, offline
    base = load_causal_lm(cfg.model)

    def save(run: MethodRun) -> None:
        name = row_name(run.method, run.alpha, cfg.alphas)
        path = models_dir(METHOD) / name / "run.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps(run.to_dict()) + "\n")
        with ctx.child(name, params={"method": run.method, "alpha": run.alpha}) as child:
            child.log_history("test_loss", [r["round"] for r in run.rounds], [r["test_loss"] for r in run.rounds])
            child.log_history("straggler_s", [r["round"] for r in run.rounds], [r["straggler_s"] for r in run.rounds])
            child.log_metrics({k: v for k, v in row(run).items() if isinstance(v, (int, float))})
            child.log_artifact(path, "rounds")

    done = _saved(cfg)
    if done:
        print(f"leff: resuming; {len(done)} finished run(s) kept: {sorted(row_name(m, a, cfg.alphas) for m, a in done)}")
    with gpu_slot():
        return run_federated(cfg, base, done=done, on_result=save, log=print)


@task(name="leff-report", cache_policy=NO_CACHE)
def report(cfg: LEFFConfig, runs: dict[tuple[str, float], MethodRun], ctx: track.RunContext) -> Report:
    return Report(method_metrics(cfg, runs, ctx.profile), plots.write_all(cfg, runs, plots_dir(METHOD)))
