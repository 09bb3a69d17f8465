"""Tasks of the SplashNet flow: the semg stages' features (checked current, never rebuilt here),
the character LM of the beam search, one GPU task per variant (generic training, zero-shot CER, per-user
fine-tuning, fine-tuned CER), the parameter / FLOP table at the paper configuration, publishing."""
from __future__ import annotations

import shutil
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.io import read_json, write_json
from paperline.methods.splashnet.config import SplashNetConfig
from tasks import track
from tasks.paths import committed_data_path, metrics_path, models_dir, plots_dir, run_pointer_path
from tasks.runners import GPU_TAG, gpu_slot

METHOD = "splashnet"


def data_version(features: Path) -> str:
    """sha256 of the feature index and statistics (they carry the data fingerprint; hashing
    hundreds of MB of features per run would cost more than the smoke training)."""
    return track.data_version([features / "index.json", features / "stats.json"])


def _load_split(cfg: SplashNetConfig, features: Path, six_bands: bool):
    from paperline.data.emg2qwerty import SessionRef, user_split
    from paperline.methods.splashnet.features import load_session_features, read_index

    entries = {e["name"]: e for e in read_index(features)["sessions"]}
    refs = [SessionRef(name, e["user"], name) for name, e in entries.items()]
    split = user_split(refs, cfg.data.test_users, cfg.data.val_users, cfg.data.test_sessions_per_user)

    def load(rs):
        return [load_session_features(features, entries[r.path], six_bands) for r in rs]

    return (load(split.train), {u: load(s) for u, s in split.finetune.items()},
            {u: load(s) for u, s in split.test.items()}, load(split.val))


@task(name="splashnet-char-lm", cache_policy=NO_CACHE)
def train_char_lm(cfg: SplashNetConfig, parent: track.Run) -> Path | None:
    """The beam search's character n-gram LM, counted on `beam_search.lm_corpus` (a text other than
    the one the prompts are typed from); None when beam search is off."""
    if not cfg.beam_search.enabled:
        return None
    from paperline.methods.splashnet.char_lm import CharNgramLM, read_lm_text

    vocabulary = cfg.data.generator.vocabulary if cfg.data.source == "generated" else None
    text = read_lm_text(committed_data_path(cfg.beam_search.lm_corpus), vocabulary)
    path = CharNgramLM.train(text, cfg.beam_search.lm_order).save(models_dir(METHOD) / "char_lm.json")
    parent.log_metrics({"char_lm/training_chars": len(text)})
    return path


@task(name="splashnet-train", tags=[GPU_TAG], cache_policy=NO_CACHE)
def train_variant(cfg: SplashNetConfig, variant: str, features: Path, parent: track.Run, profile: str,
                  data: str, lm_path: Path | None = None) -> dict:
    import torch

    from paperline.methods.splashnet.pipeline import beam_decoder, model_spec, train_and_evaluate

    torch.set_num_threads(cfg.threads)
    spec = model_spec(cfg, variant)
    params = {"variant": variant, "rtn": spec.rtn, "six_bands": spec.six_bands, "share_hand_weights": spec.share_hand_weights,
              "mlp_features": list(spec.mlp_features), "block_channels": list(spec.block_channels)}
    with gpu_slot() as device, track.child_run(parent, METHOD, variant, profile, data,
                                               params=params | {"device": str(device)}) as run:
        train, finetune, test, val = _load_split(cfg, features, spec.six_bands)
        out = models_dir(METHOD) / variant
        result = train_and_evaluate(cfg, variant, train, finetune, test, device, out, data,
                                    log=lambda user, m: run.log_metrics({f"{k}/{user}": v for k, v in m.items()}),
                                    beam=beam_decoder(cfg, lm_path), val=val)
        steps, losses = zip(*result["history"]) if result["history"] else ((), ())
        run.log_history("train_ctc_loss", steps, losses)
        if result.get("val_history"):
            run.log_history("val_cer", *zip(*result["val_history"]))
        run.log_metrics({k: v for k, v in result.items() if isinstance(v, (int, float))})
        run.log_artifact(out / "generic.pt", "checkpoints")
    return result


@task(name="splashnet-model-table", cache_policy=NO_CACHE)
def model_table(parent: track.Run) -> dict:
    """Parameters and FLOPs at the paper configuration (computed, not copied from the paper)."""
    from paperline.methods.splashnet.pipeline import paper_model_table

    rows = paper_model_table()
    parent.log_metrics({f"paper_models/{name}/{k}": v for name, row in rows.items() for k, v in row.items()})
    return rows


@task(name="splashnet-publish", cache_policy=NO_CACHE)
def publish(cfg: SplashNetConfig, results: list[dict], table: dict, features: Path, parent: track.Run) -> dict:
    from paperline.methods.splashnet import plots

    variants = [r["variant"] for r in results]
    rows = {r["variant"]: {k: v for k, v in r.items() if k not in ("history", "val_history", "variant")}
            for r in results}
    stats = read_json(features / "stats.json")
    summary = {"variants": rows, "paper_models": table, "feature_stats": stats["summary"],
               "decoders": ["greedy"] + (["beam_char_lm"] if cfg.beam_search.enabled else []),
               "test_users": sorted({k.split("/", 1)[1] for r in rows.values()
                                                          for k in r if k.startswith("zero_shot_cer/")})}
    if "baseline" in rows:
        for v in variants:
            rows[v]["zero_shot_cer_vs_baseline"] = rows[v]["zero_shot_cer"] - rows["baseline"]["zero_shot_cer"]
            rows[v]["finetuned_cer_vs_baseline"] = rows[v]["finetuned_cer"] - rows["baseline"]["finetuned_cer"]
            rows[v]["zero_shot_ctc_loss_vs_baseline"] = rows[v]["zero_shot_ctc_loss"] - rows["baseline"]["zero_shot_ctc_loss"]
            if "zero_shot_beam_cer" in rows[v]:
                rows[v]["zero_shot_beam_cer_vs_baseline"] = (rows[v]["zero_shot_beam_cer"]
                                                             - rows["baseline"]["zero_shot_beam_cer"])
    out = plots_dir(METHOD)
    out.mkdir(parents=True, exist_ok=True)
    paths = [plots.plot_cer(summary, variants, out / "cer_per_variant.png"),
             plots.plot_loss_curves({r["variant"]: r["history"] for r in results}, out / "loss_curves.png")]
    for qa in (features / "qa" / "channel_stats.png", features.parent / "sessions" / "qa" / "session_traces.png",
               features.parent / "sessions" / "qa" / "band_powers.png"):
        if qa.is_file():  # the data stages' figures, shown beside the method's
            shutil.copy(qa, out / qa.name)
            paths.append(out / qa.name)
    columns = ["zero_shot_cer", "finetuned_cer", "zero_shot_beam_cer", "finetuned_beam_cer", "zero_shot_ctc_loss",
               "finetuned_ctc_loss"]
    columns = [c for c in columns if c in rows[variants[0]]]
    paths.append(plots.write_csv(out / "cer.csv", ["variant", *columns],
                                 [[v, *(rows[v][c] for c in columns)] for v in variants]))
    for path in paths:
        parent.log_artifact(path, "plots")
    parent.log_metrics({f"{v}/{k}": x for v, row in rows.items() for k, x in row.items() if isinstance(x, (int, float))})
    write_json(metrics_path(METHOD), summary)
    write_json(run_pointer_path(METHOD), track.run_pointer(parent, METHOD))
    return summary
