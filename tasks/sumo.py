"""Tasks of the SUMO flow: the theory check, one training task per (optimizer, lr) on each task
(digits, and the causal LM on the text corpus when the profile has text_lm), the step-time
measurement, then the report."""
from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.data.digits import digits_file
from paperline.methods.sumo import plots
from paperline.methods.sumo.claims import INITIAL
from paperline.methods.sumo.config import SumoConfig
from paperline.methods.sumo.data import c4_version, load_digits_split
from paperline.methods.sumo.summary import best_lrs, lr_table, method_metrics, summarize, text_lm_summary
from paperline.methods.sumo.theory import ns_error_vs_condition_number
from paperline.methods.sumo.train import digits_step_times, train_one
from paperline.train.distributed import DistributedConfig
from tasks import track
from tasks.paths import plots_dir
from tasks.publish import Report
from tasks.runners import GPU_TAG
from tasks.unit import unit

METHOD = "sumo"


def variant_name(optimizer: str, lr: float) -> str:
    return f"{optimizer}_lr{lr:g}"


def lm_variant_name(optimizer: str, lr: float) -> str:
    return f"lm_{variant_name(optimizer, lr)}"


def data_version(cfg: SumoConfig) -> str:
    """digits: sha256 of the data file. C4: of the shards' names and sizes and the tokenizer (a
    missing C4 folder or tokenizer fails here, before any training). With text_lm, the corpus
    folder's files too, read first by `load_corpus` (a missing or mismatched file is named here)."""
    corpus = []
    if cfg.text_lm is not None:
        from paperline.data.text_corpus import load_corpus

        load_corpus(cfg.text_lm.corpus, cfg.text_lm.block_size)
        corpus = [cfg.text_lm.corpus]
    if cfg.task == "digits_mlp":
        return track.data_version([digits_file(), *corpus])
    return c4_version(cfg.lm.c4_dir, cfg.lm.tokenizer) + (f"+{track.data_version(corpus)}" if corpus else "")


def optimizer_runs(cfg: SumoConfig, ctx: track.RunContext):
    """An MLflow child run per optimizer, open while its lr runs nest under it: the comparison
    row (the optimizer at its best lr) lands on it when the flow publishes."""
    return ctx.children({name: {"optimizer": name, "lr_grid": cfg.lr_grid[name]} for name in cfg.optimizers})


def text_lm_runs(cfg: SumoConfig, ctx: track.RunContext):
    """The causal-LM task's MLflow run (its (optimizer, lr) runs nest under it; its comparison lands
    on it at the report), or nothing when the profile has no text_lm."""
    if cfg.text_lm is None:
        return contextlib.nullcontext(None)
    t = cfg.text_lm
    return ctx.child("text_lm", params={"corpus": t.corpus, "hidden_size": t.hidden_size, "num_layers": t.num_layers,
                                        "block_size": t.block_size, "batch_size": t.batch_size, "steps": t.steps,
                                        "rank": t.rank, "update_period": t.update_period})


@contextlib.contextmanager
def text_lm_lr_runs(cfg: SumoConfig, ctx: track.RunContext, lm_run: track.Run | None) -> Iterator[dict[str, track.Run]]:
    """An MLflow run per (optimizer, lr) of the causal LM, nested under text_lm and open while its
    seeds' runs nest under it (the grid at seed 0, then the best lr at the others); none without
    text_lm."""
    with contextlib.ExitStack() as stack:
        yield {} if lm_run is None else {
            lm_variant_name(name, lr): stack.enter_context(
                ctx.child(lm_variant_name(name, lr), params={"optimizer": name, "lr": lr}, parent=lm_run))
            for name in cfg.text_lm.optimizers for lr in cfg.text_lm.lr_grid[name]}


def _log_result(run: track.Run, result: dict) -> None:
    """One seed's curves (every history it has) and its scalars, on that seed's run."""
    for history in (result["history"], result.get("eval_history", {})):
        for key, values in history.items():
            if key != "step":
                run.log_history(key, history["step"], values)
    run.log_metrics({k: v for k, v in result.items() if isinstance(v, (int, float)) and k not in ("lr", "seed_index")})


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
@task(name="sumo-theory", cache_policy=NO_CACHE)
def theory(cfg: SumoConfig) -> dict:
    """Newton–Schulz vs exact SVD against κ: pure linear algebra on small matrices (a CPU task)."""
    return ns_error_vs_condition_number(cfg)


def training_devices(cfg: SumoConfig, distributed: DistributedConfig) -> int:
    """Devices one training task holds: LLaMA on C4 spreads over runtime.distributed's, the digits
    MLP (a few thousand weights) trains on one."""
    return distributed.devices if cfg.task == "llama_c4" else 1


@task(name="sumo-train", tags=[GPU_TAG], cache_policy=NO_CACHE)
def train_variant(cfg: SumoConfig, optimizer: str, lr: float, ctx: track.RunContext,
                  optimizer_run: track.Run, distributed: DistributedConfig = DistributedConfig()) -> list[dict]:
    """Every seed of one (optimizer, lr): an MLflow run nested under the optimizer's, a run per seed
    nested under it, a checkpoint per seed. `distributed` (params/runtime.yaml runtime.distributed) spreads
    LLaMA-on-C4 over devices."""
    variant = variant_name(optimizer, lr)
    results = []
    # one thread: small matmuls; the flow's other task runs beside this one
    with unit(ctx, variant, {"optimizer": optimizer, "lr": lr}, threads=1, parent=optimizer_run,
              devices=training_devices(cfg, distributed)) as u:
        run, device, devices = u.run, u.device, u.devices
        if cfg.task == "digits_mlp":
            digits = load_digits_split(cfg.test_fraction, cfg.split_seed).to(device)
        for s in cfg.run_seeds():
            checkpoint = u.models / variant / f"seed{s}.pt"
            if cfg.task == "digits_mlp":
                result = train_one(cfg, digits, optimizer, lr, s, device, checkpoint_path=checkpoint,
                                   progress=sys.stderr.isatty())
            else:
                from paperline.methods.sumo.lm import pretrain_on_c4

                result = pretrain_on_c4(cfg, optimizer, lr, s, device, checkpoint_path=checkpoint,
                                        progress=sys.stderr.isatty(), distributed=distributed,
                                        device_indices=[d.index for d in devices])
            with ctx.child(f"{variant}/seed{s}", params={"optimizer": optimizer, "lr": lr, "seed": s},
                           parent=run) as seed_run:
                _log_result(seed_run, result)
            results.append(result)
        run.log_artifact(u.models / variant / "seed0.pt", "checkpoints")
        entry = lr_table(results)[optimizer][lr]
        run.log_metrics({k: v for k, v in entry.items() if isinstance(v, (int, float))})
    return results


@task(name="sumo-text-lm", tags=[GPU_TAG], cache_policy=NO_CACHE)
def train_text_lm_seed(cfg: SumoConfig, optimizer: str, lr: float, seed: int, ctx: track.RunContext,
                       lr_run: track.Run, distributed: DistributedConfig = DistributedConfig()) -> dict:
    """One seed of one (optimizer, lr) on the causal LM: an MLflow run nested under the (optimizer,
    lr)'s with the loss per step and, for SUMO, the moment condition numbers every k steps.
    `distributed` (params/runtime.yaml runtime.distributed) spreads the training over devices."""
    from paperline.methods.sumo.text_lm import train_text_lm

    variant = lm_variant_name(optimizer, lr)
    with unit(ctx, f"{variant}/seed{seed}", {"optimizer": optimizer, "lr": lr, "seed": seed}, threads=1,
              parent=lr_run, devices=distributed.devices) as u:
        run = u.run
        result = train_text_lm(cfg, optimizer, lr, seed, u.device, u.models / variant / f"seed{seed}.pt",
                               progress=sys.stderr.isatty(), distributed=distributed,
                               device_indices=[d.index for d in u.devices])
        _log_result(run, result)
        c = result["condition"]
        for key in ("median", "max"):
            if c["step"]:
                run.log_history(f"moment_condition_{key}", c["step"], c[key])
    return result


def text_lm_best_lrs(cfg: SumoConfig, sweep: list[dict]) -> dict[str, float]:
    """Each optimizer's best lr on the seed-0 grid (the ones that diverged everywhere left out):
    the lr its other seeds run at."""
    return {name: lr for name, lr in best_lrs(sweep, list(cfg.text_lm.optimizers), tuning_seeds=1).items()
            if lr is not None}


@task(name="sumo-step-time", tags=[GPU_TAG], cache_policy=NO_CACHE)
def step_time(cfg: SumoConfig, ctx: track.RunContext) -> dict:
    """Step time and state bytes of every optimizer against AdamW, round-robin in this one task."""
    # one thread, as the training tasks, so times compare with theirs
    with unit(ctx, "step_time", {"rounds": cfg.timing_rounds, "steps": cfg.timing_steps}, threads=1) as u:
        run, device = u.run, u.device
        if cfg.task == "digits_mlp":
            times = digits_step_times(cfg, load_digits_split(cfg.test_fraction, cfg.split_seed).to(device), device)
        else:
            from paperline.methods.sumo.lm import llama_step_times

            times = llama_step_times(cfg, device)
        run.log_metrics({f"{name}/{k}": v for name, row in times.items() for k, v in row.items()})
    return times


@task(name="sumo-report", cache_policy=NO_CACHE)
def report(cfg: SumoConfig, runs: list[dict], theory_rows: dict, times: dict, ctx: track.RunContext,
           lm_runs: list[dict] | None = None, lm_run: track.Run | None = None,
           lm_lr_runs: dict[str, track.Run] | None = None) -> Report:
    """The comparison and the plots (PNG for MLflow and DVC, CSV for `dvc plots`); the causal-LM
    task's rows land on its text_lm run as <optimizer>/<column>."""
    rows = summarize(runs, times, list(cfg.optimizers))
    lm = text_lm_summary(lm_runs, list(cfg.text_lm.optimizers)) if lm_runs else None
    with ctx.child(INITIAL, params={"what": "each seed's initial model, scored as the trained ones"}):
        pass  # the trivial baseline's row lands on it when the flow publishes
    for optimizer, by_lr in (lr_table(lm_runs) if lm_runs else {}).items():  # each (optimizer, lr): its seeds' mean
        for lr, entry in by_lr.items():
            if (lr_run := (lm_lr_runs or {}).get(lm_variant_name(optimizer, lr))) is not None:
                lr_run.log_metrics({k: v for k, v in entry.items() if isinstance(v, (int, float))})
    if lm is not None and lm_run is not None:
        lm_run.log_metrics({f"{name}/{k}": float(v) for name, row in lm["rows"].items() for k, v in row.items()
                            if isinstance(v, (int, float)) and v is not None})
        lm_run.log_metrics({k: float(v) for k, v in lm["headline"].items() if isinstance(v, (int, float))})
    return Report(method_metrics(rows, runs, theory_rows, ctx.profile, lm),
                  plots.write_all(cfg, runs, rows, theory_rows, plots_dir(METHOD), lm_runs, lm and lm["rows"]))
