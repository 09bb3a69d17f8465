"""Tasks of the sEMG data-prep flows (flows/prep_semg.py), a chunk of sessions each, and what
the SplashNet flow checks of their outputs.

- `semg-sessions`: the embedded default writes generated emg2qwerty-format sessions into
  data/splashnet/sessions/ (with mne QA plots under qa/); `data.source: directory` lists the real
  sessions where they are (nothing is copied). Either way `manifest.json` names the sessions.
- `semg-normalize`: log-spectrogram features (33 bins and the 6 bands) of every session into
  data/splashnet/features/, with the per-user channel statistics before and after RTN.

Parameters: `splashnet.data` of the profile `splashnet.profile` names (the method that reads
these data). The flow calls `require_prepared`, which refuses missing features or features of
other data parameters.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.data import semg_synth
from paperline.data.chunks import ChunkMap, map_serially
from paperline.io import DataError, atomic_dir, json_digest, read_json, write_json
from paperline.methods.splashnet import features
from paperline.methods.splashnet.config import SplashNetConfig
from tasks.paths import committed_data_path, repo_path

METHOD = "splashnet"
MANIFEST = "manifest.json"


def sessions_dir() -> Path:
    return repo_path("data", METHOD, "sessions")


def features_dir() -> Path:
    return repo_path("data", METHOD, "features")


def sessions_fingerprint(cfg: SplashNetConfig) -> str:
    return json_digest({"data": cfg.data.model_dump(), "seed": cfg.seed})


def features_fingerprint(cfg: SplashNetConfig) -> str:
    return json_digest({"sessions": sessions_fingerprint(cfg), "rtn": [cfg.rtn_warmup_frames, cfg.rtn_eps]})


def build_sessions(cfg: SplashNetConfig, map_chunks: ChunkMap = map_serially) -> dict[str, Any]:
    from paperline.data import emg2qwerty
    from paperline.methods.splashnet import plots
    from paperline.methods.splashnet.plots import BAND_EDGES_HZ

    out = sessions_dir()
    with atomic_dir(out) as tmp:
        if cfg.data.source == "generated":
            text = semg_synth.load_corpus(committed_data_path(cfg.data.corpus), cfg.data.generator.vocabulary)
            paths = semg_synth.generate_sessions(tmp, cfg.data.generator, text, seed=cfg.seed, map_chunks=map_chunks)
            refs = [emg2qwerty.SessionRef(str(Path("data", METHOD, "sessions", p.name)), *_user_name(p))
                    for p in paths]
            first = emg2qwerty.read_session(paths[0])
            plots.plot_session_qa(semg_synth.session_raw(first), tmp / "qa" / "session_traces.png")
            powers = semg_synth.band_powers(first, BAND_EDGES_HZ)
            plots.plot_band_powers(powers["freqs"], powers["psd"], powers["band_fraction"],
                                   tmp / "qa" / "band_powers.png")
            extra = {"generator_users": semg_synth.user_truth(cfg.data.generator, cfg.seed),
                     "band_fraction": powers["band_fraction"]}
        else:
            refs = emg2qwerty.scan_sessions(Path(cfg.data.directory).expanduser())
            extra = {"directory": str(cfg.data.directory)}
        manifest = {"fingerprint": sessions_fingerprint(cfg), "source": cfg.data.source,
                    "sessions": [r.__dict__ for r in refs], **extra}
        write_json(tmp / MANIFEST, manifest)
    return manifest


def _user_name(path: Path) -> tuple[str, str]:
    from paperline.data.emg2qwerty import read_attributes

    attrs = read_attributes(path)
    return str(attrs["user"]), str(attrs["session_name"])


def _absolute(refs):
    from paperline.data.emg2qwerty import SessionRef

    return [SessionRef(str(p if (p := Path(r.path)).is_absolute() else repo_path(r.path)), r.user, r.session_name)
            for r in refs]


def build_features(cfg: SplashNetConfig, map_chunks: ChunkMap = map_serially) -> dict[str, Any]:
    from paperline.methods.splashnet import plots

    manifest_path = sessions_dir() / MANIFEST
    if not manifest_path.is_file():
        raise FileNotFoundError(f"{manifest_path}: no session manifest (run the semg-sessions stage: "
                                "python -m flows run semg-sessions)")
    manifest = read_json(manifest_path)
    if manifest.get("fingerprint") != sessions_fingerprint(cfg):
        raise DataError(f"{manifest_path}: written for other data parameters; re-run the semg-sessions stage")
    refs = _absolute(features.manifest_refs(manifest))
    with atomic_dir(features_dir()) as tmp:
        index = features.write_features(refs, tmp, cfg.rtn_warmup_frames, cfg.rtn_eps, features_fingerprint(cfg),
                                        map_chunks=map_chunks)
        plots.plot_channel_stats(read_json(tmp / "stats.json"), tmp / "qa" / "channel_stats.png")
    return index


def require_prepared(cfg: SplashNetConfig) -> Path:
    """The features for `cfg`, as the semg stages wrote them. Missing or made with other data
    parameters (a `--set` given to the flow but not to the stages): an error naming the folder and
    the command, never a silent rebuild of another stage's outputs."""
    rerun = ("run the semg stages with the same profile and --set options: dvc repro semg-normalize, or "
             "python -m flows run semg-sessions && python -m flows run semg-normalize")
    for path, fingerprint in ((sessions_dir() / MANIFEST, sessions_fingerprint(cfg)),
                              (features_dir() / "index.json", features_fingerprint(cfg))):
        if not path.is_file():
            raise FileNotFoundError(f"{path}: not prepared; {rerun}")
        if read_json(path).get("fingerprint") != fingerprint:
            raise DataError(f"{path.parent}: prepared with other data parameters than this run's; {rerun}")
    return features_dir()


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
write_sessions = task(semg_synth.write_sessions, name="semg-generate-sessions", cache_policy=NO_CACHE)
featurize_sessions = task(features.featurize_sessions, name="semg-featurize-sessions", cache_policy=NO_CACHE)
