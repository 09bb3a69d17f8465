"""Tasks of the LEFF flow: every (α, method, seed) in one Flower simulation (one task: the clients'
wall times mean something only when nothing runs beside them), a child run per (α, method) with a
run per seed nested under it, each finished run saved so a killed flow resumes at the next; then
the report."""
from __future__ import annotations

import os
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.methods.leff import plots
from paperline.methods.leff.claims import PRETRAINED
from paperline.methods.leff.config import LEFFConfig, runs_planned
from paperline.methods.leff.fed import MethodRun, run_federated
from paperline.methods.leff.summary import METHOD, Runs, method_metrics, row, row_name, seed_name
from paperline.train.lm_base import check_causal_lm, load_causal_lm
from paperline.train.records import read_unit, write_unit
from tasks import track
from tasks.paths import models_dir, plots_dir, repo_path
from tasks.publish import Report
from tasks.runners import GPU_TAG
from tasks.unit import unit


def data_version(cfg: LEFFConfig) -> str:
    """The corpus's, proxy text's and base model's digest; a missing or malformed corpus file, proxy
    text (or one whose hash differs from its SHA256SUMS) or model folder fails here, before any work
    (the weights' shapes are load_causal_lm's check, at the first task)."""
    from paperline.data.text_corpus import load_corpus, read_slice

    check_causal_lm(cfg.model)
    load_corpus(cfg.corpus, cfg.block_size)
    read_slice(cfg.proxy_text)
    return track.data_version([cfg.corpus, cfg.model, cfg.proxy_text])


def run_path(cfg: LEFFConfig, method: str, alpha: float, seed: int):
    return models_dir(METHOD) / seed_name(method, alpha, seed, cfg.alphas) / "run.json"


def unit_settings(cfg: LEFFConfig, method: str, alpha: float, seed: int) -> dict:
    """A run's record's fingerprint: the whole config (one simulation trains every run, and a client
    dead in one stays out of the later ones) and the run's own (method, α, seed)."""
    return {"config": cfg.model_dump(mode="json"), "method": method, "alpha": alpha, "seed": seed}


def tuning_path(cfg: LEFFConfig, method: str, lr: float) -> Path:
    """A tuning run's record, beside its method's first-α, first-seed run (the one the sweep chooses),
    in a folder named by its lr's repr (which reads back as the same float)."""
    return run_path(cfg, method, cfg.alphas[0], cfg.run_seeds()[0]).parent / f"lr{lr!r}" / "run.json"


def tuning_settings(cfg: LEFFConfig, method: str, lr: float) -> dict:
    return unit_settings(cfg, method, cfg.alphas[0], cfg.run_seeds()[0]) | {"lr": lr}


def _saved_tuning(cfg: LEFFConfig) -> dict[tuple[str, float], MethodRun]:
    """The tuning runs a killed flow finished, {(method, lr): run} (fed.train_planned's `tuned`)."""
    kept = {}
    for method in cfg.methods:
        for path in sorted(tuning_path(cfg, method, 1.0).parent.parent.glob("lr*/run.json")):
            lr = float(path.parent.name.removeprefix("lr"))
            record = read_unit(path, tuning_settings(cfg, method, lr))
            if record is not None and len((run := MethodRun.from_dict(record)).rounds) == cfg.rounds:
                kept[(method, lr)] = run
    return kept


def _saved(cfg: LEFFConfig) -> Runs:
    done = {}
    for method, alpha, seed in runs_planned(cfg):
        # one simulation trains every run not read back here (so no finished_unit)
        record = read_unit(run_path(cfg, method, alpha, seed), unit_settings(cfg, method, alpha, seed))
        if record is None:
            continue
        run = MethodRun.from_dict(record)
        if len(run.rounds) == cfg.rounds:  # a run cut short is trained again
            done[(method, alpha, seed)] = run
    return done


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
@task(name="leff-train", tags=[GPU_TAG], cache_policy=NO_CACHE)
def train_all(cfg: LEFFConfig, ctx: track.RunContext) -> Runs:
    """CPU only: the slot keeps the simulation alone. A child run per (method, α), open while its
    seeds train; its row, the mean over seeds, lands on it when the flow publishes."""
    os.environ.setdefault("FLWR_HOME", str(repo_path(".flwr")))  # project-local, offline
    base = load_causal_lm(cfg.model)
    # the pretrained model (the trivial baseline, every run's round 0) is a variant of its own
    variants = {row_name(m, a, cfg.alphas): {"method": m, "alpha": a, "seeds": cfg.run_seeds()}
                for m, a in [(PRETRAINED, a) for a in cfg.alphas] + [(m, a) for m, a, _ in runs_planned(cfg)]}

    def save(run: MethodRun, variant_runs: dict[str, track.Run]) -> None:
        path = run_path(cfg, run.method, run.alpha, run.seed)
        write_unit(path, unit_settings(cfg, run.method, run.alpha, run.seed), run.to_dict())
        with ctx.child(seed_name(run.method, run.alpha, run.seed, cfg.alphas),
                       params={"method": run.method, "alpha": run.alpha, "seed": run.seed},
                       parent=variant_runs[row_name(run.method, run.alpha, cfg.alphas)]) as child:
            child.log_history("test_loss", [r["round"] for r in run.rounds], [r["test_loss"] for r in run.rounds])
            child.log_history("straggler_s", [r["round"] for r in run.rounds], [r["straggler_s"] for r in run.rounds])
            child.log_metrics({k: v for k, v in row(run).items() if isinstance(v, (int, float))})
            child.log_artifact(path, "rounds")

    def save_tuning(run: MethodRun) -> None:
        assert run.lr is not None  # a tuning run trains at its grid point
        write_unit(tuning_path(cfg, run.method, run.lr), tuning_settings(cfg, run.method, run.lr), run.to_dict())

    done, tuned = _saved(cfg), _saved_tuning(cfg)
    if done or tuned:
        print(f"leff: resuming; {len(done)} finished run(s) kept: {sorted(seed_name(*k, cfg.alphas) for k in done)}, "
              f"and {len(tuned)} lr-tuning run(s)")
    with unit(ctx), ctx.children(variants) as variant_runs:
        return run_federated(cfg, base, done=done, on_result=lambda run: save(run, variant_runs), log=print,
                             tuned=tuned, on_tuned=save_tuning)


@task(name="leff-report", cache_policy=NO_CACHE)
def report(cfg: LEFFConfig, runs: Runs, ctx: track.RunContext) -> Report:
    return Report(method_metrics(cfg, runs, ctx.profile), plots.write_all(cfg, runs, plots_dir(METHOD)))
