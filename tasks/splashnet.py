"""Tasks of the SplashNet flow: the semg stages' features (checked current, never rebuilt here),
the character LM of the beam search, one GPU task per variant and seed (generic training, zero-shot
CER, per-user fine-tuning, fine-tuned CER), the parameter / FLOP table at the paper configuration,
the report (each variant's mean and spread over the seeds)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.io import read_json
from paperline.methods.splashnet import plots
from paperline.methods.splashnet.claims import blank_rows
from paperline.methods.splashnet.config import SplashNetConfig
from paperline.methods.splashnet.summary import NOT_ROW, method_metrics, variant_rows
from paperline.metrics import numeric
from paperline.train.distributed import DistributedConfig
from tasks import track
from tasks.paths import committed_data_path, models_dir, plots_dir
from tasks.publish import Report
from tasks.runners import GPU_TAG
from tasks.semg_prep import require_prepared
from tasks.unit import unit

METHOD = "splashnet"


@dataclass(frozen=True)
class Features:
    path: Path
    version: str


def features(cfg: SplashNetConfig) -> Features:
    """The semg stages' features for `cfg` (missing or stale ones fail here, before any work),
    versioned by the feature index and statistics: they carry the data fingerprint; hashing hundreds
    of MB of features per run would cost more than the smoke training."""
    path = require_prepared(cfg)
    return Features(path, track.data_version([path / "index.json", path / "stats.json"]))


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
@task(name="splashnet-char-lm", cache_policy=NO_CACHE)
def train_char_lm(cfg: SplashNetConfig) -> dict | None:
    """The beam search's character n-gram LM, counted on `beam_search.lm_corpus` (a text other than
    the one the prompts are typed from): {"path", "training_chars"}; None when beam search is off."""
    if not cfg.beam_search.enabled:
        return None
    from paperline.methods.splashnet.char_lm import CharNgramLM, read_lm_text

    vocabulary = cfg.data.generator.vocabulary if cfg.data.source == "generated" else None
    text = read_lm_text(committed_data_path(cfg.beam_search.lm_corpus), vocabulary)
    path = CharNgramLM.train(text, cfg.beam_search.lm_order).save(models_dir(METHOD) / "char_lm.json")
    return {"path": path, "training_chars": len(text)}


def variant_runs(cfg: SplashNetConfig, ctx: track.RunContext):
    """A child run per variant, open while its seeds train (each seed's run nested under it); the
    variant's row, the mean over seeds, lands on it when the flow publishes."""
    return ctx.children({v: {"variant": v, "seeds": cfg.run_seeds()} for v in cfg.variants})


@task(name="splashnet-train", tags=[GPU_TAG], cache_policy=NO_CACHE)
def train_variant(cfg: SplashNetConfig, variant: str, seed: int, data: Features, ctx: track.RunContext,
                  variant_run: track.Run | None = None, lm_path: Path | None = None,
                  distributed: DistributedConfig = DistributedConfig()) -> dict:
    """One variant at one seed, on its MLflow run `<variant>/seed<seed>` (nested under `variant_run`),
    its weights under models/splashnet/<variant>/seed<seed>/."""
    from paperline.methods.splashnet.pipeline import beam_decoder, load_split, model_spec, train_and_evaluate

    spec = model_spec(cfg, variant)
    params = {"variant": variant, "seed": seed, "rtn": spec.rtn, "six_bands": spec.six_bands, "share_hand_weights": spec.share_hand_weights,
              "mlp_features": list(spec.mlp_features), "block_channels": list(spec.block_channels)}
    with unit(ctx, f"{variant}/seed{seed}", params | {"distributed": distributed.model_dump()},
              threads=cfg.threads, parent=variant_run, devices=distributed.devices) as u:
        run, device, devices = u.run, u.device, u.devices
        train, finetune, test, val = load_split(cfg, data.path, spec.six_bands)
        out = u.models / variant / f"seed{seed}"
        result = train_and_evaluate(cfg, variant, train, finetune, test, device, out, data.version,
                                    log=lambda user, m: run.log_metrics({f"{k}/{user}": v for k, v in m.items()}),
                                    beam=beam_decoder(cfg, lm_path), val=val, distributed=distributed,
                                    device_indices=[d.index for d in devices], seed=seed)
        steps, losses = zip(*result["history"]) if result["history"] else ((), ())
        run.log_history("train_ctc_loss", steps, losses)
        if result.get("val_history"):
            run.log_history("val_cer", *zip(*result["val_history"]))
        run.log_artifact(out / "generic.pt", "checkpoints")
        run.log_final(numeric({k: v for k, v in result.items() if "/" not in k and k not in NOT_ROW}))  # this seed's figures
    return result


@task(name="splashnet-model-table", cache_policy=NO_CACHE)
def model_table() -> dict:
    """Parameters and FLOPs at the paper configuration (computed, not copied from the paper)."""
    from paperline.methods.splashnet.pipeline import paper_model_table

    return paper_model_table()


@task(name="splashnet-report", cache_policy=NO_CACHE)
def report(cfg: SplashNetConfig, results: list[dict], table: dict, char_lm: dict | None, data: Features,
           ctx: track.RunContext) -> Report:
    """The comparison (each variant's mean and spread over its seeds) and the plots (PNG for MLflow
    and DVC, CSV for `dvc plots`)."""
    rows, per_user, per_seed = variant_rows(results)
    details = {"decoders": ["greedy"] + (["beam_char_lm"] if cfg.beam_search.enabled else [])}
    if char_lm:
        details["char_lm_training_chars"] = char_lm["training_chars"]
    stats = read_json(data.path / "stats.json")["summary"]
    histories: dict[str, list] = {}
    for r in results:
        histories.setdefault(r["variant"], []).append(r["history"])
    metrics = method_metrics(rows, per_user, per_seed, table, stats, ctx.profile, blank_rows(results), **details)
    return Report(metrics, plots.write_all(rows, per_seed, histories, data.path, plots_dir(METHOD)))
