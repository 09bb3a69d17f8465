"""The sEMG data-prep flows: semg-sessions (generated emg2qwerty-format sessions, a chunk of
sessions a task, with mne QA plots; or a folder of real sessions listed) and semg-normalize
(log-spectrogram features, a chunk of sessions a task, then the per-user channel statistics).
Parameters: splashnet.profiles.<splashnet.profile>: its data, seed and RTN settings."""
from __future__ import annotations

from prefect import flow

from flows.prep import resolve_prep, stage_chunk_mapper
from tasks.semg_prep import (
    build_features,
    build_sessions,
    features_dir,
    featurize_sessions,
    sessions_dir,
    write_sessions,
)


@flow(name="semg-sessions", log_prints=True)
def semg_sessions_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    profile, cfg = resolve_prep("semg-sessions", profile, overrides or [])
    manifest = build_sessions(cfg, map_chunks=stage_chunk_mapper(write_sessions))
    print(f"semg-sessions ({profile}): {len(manifest['sessions'])} sessions -> {sessions_dir()}")
    return {"profile": profile, "sessions": len(manifest["sessions"])}


@flow(name="semg-normalize", log_prints=True)
def semg_normalize_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    profile, cfg = resolve_prep("semg-normalize", profile, overrides or [])
    index = build_features(cfg, map_chunks=stage_chunk_mapper(featurize_sessions))
    print(f"semg-normalize ({profile}): {len(index['sessions'])} sessions -> {features_dir()}")
    return {"profile": profile, "sessions": len(index["sessions"])}
