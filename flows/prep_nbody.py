"""The nbody flow: particle trajectories in the EGNN .npy layout for GeoAda: a vectorised
charged-particle simulation (the original task's sets, the frame-control fine-tuning set, a
global-control set of other interaction strengths), or the windows of an MD17 .npz by path (one
task: seconds at tiny/smoke). Parameters: nbody.profiles.<the profile geoada.profile names>."""
from __future__ import annotations

from prefect import flow

from flows.prep import resolve_prep
from tasks.nbody_prep import build, nbody_dir


@flow(name="nbody", log_prints=True)
def nbody_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    profile, cfg = resolve_prep("nbody", profile, overrides or [])
    record = build.submit(cfg).result()
    print(f"nbody ({profile}): {record['source']} {record['trajectories']} in {record['seconds']:.1f} s "
          f"-> {nbody_dir(cfg)}")
    return {"profile": profile, **{k: record[k] for k in ("source", "trajectories")}}
