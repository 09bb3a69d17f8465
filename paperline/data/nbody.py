"""Particle trajectories for the geometric diffusion methods (GeoAda): a charged-particle N-body
simulator, the `.npy` layout the equivariant-GNN literature uses for it, and MD17-style `.npz`
molecular trajectories read by path.

The simulator is the NRI/EGNN "charged" system (../shared/DATA.md): n particles with charges ±1 in
3D, Coulomb-like forces q_i q_j (x_i − x_j)/‖x_i − x_j‖³ scaled by an interaction strength (clipped
at 0.1/dt), leapfrog integration with dt = 1e-3 and a frame every 100 steps, reflecting walls of a
box of half-width 5; initial positions N(0, loc_std²), initial velocities of norm vel_norm in a
random direction. All simulations advance together (vectorised over trajectories).

Layout (EGNN's n_body_system/dataset/generate_dataset.py), one file per array and split:
    loc_<split>_<suffix>.npy      (S, T, 3, n) float  positions
    vel_<split>_<suffix>.npy      (S, T, 3, n) float  velocities
    charges_<split>_<suffix>.npy  (S, n, 1)    float  charges (atomic numbers for MD17)
    edges_<split>_<suffix>.npy    (S, n, n)    float  edge attributes (q_i q_j)
plus, for the global-control set only, strength_<split>_<suffix>.npy (S,): the interaction strength
of each trajectory (the invariant global control). Loaders return positions as (S, T, n, 3).

MD17 (`.npz` with `R` (frames, atoms, 3) in Å and `z` (atoms,) atomic numbers, as sGDML ships it):
cut into windows of `span` frames every `stride` frames; velocities are frame differences.
"""
from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from paperline.config import ProjectPath, StrictModel
from paperline.io import DataError, one_line

RECORD_FILE = "nbody.json"
PRETRAIN_SUFFIX = "charged5"  # the original task's regime (EGNN names sets by system and size)
GLOBAL_SUFFIX = "charged5_strength"  # the global-control set: a strength per trajectory
# split names: the original task's train/test, the frame-control fine-tuning set (same regime),
# the global-control set's train/test
PRETRAIN_SPLITS, FINETUNE_SPLIT, GLOBAL_SPLITS = ("train", "test"), "finetune", ("train", "test")


class NBodyError(DataError):
    """Trajectory files that are not what the method needs; the message names the file and field."""


class NBodyConfig(StrictModel):
    """The `nbody` prep stage: simulate (the embedded default) or read MD17 by path."""

    source: Literal["simulate", "md17"] = "simulate"
    md17: ProjectPath | None = None  # an MD17-style .npz (source md17)
    md17_stride: int = Field(10, ge=1)  # frames between the starts of two windows
    n_particles: int = Field(5, ge=2)
    frames: int = Field(30, ge=2)  # per trajectory (the span the method cuts its windows from)
    sample_every: int = Field(100, ge=1)  # integration steps between saved frames
    dt: float = Field(1e-3, gt=0)
    box: float = Field(5.0, gt=0)
    loc_std: float = Field(1.0, gt=0)
    vel_norm: float = Field(0.5, ge=0)
    strength: float = Field(1.0, gt=0)  # the original task's interaction strength
    # the global-control set: each trajectory's strength drawn uniformly from these
    control_strengths: list[float] = Field([0.25, 3.0], min_length=1)
    train: int = Field(1000, ge=1)  # original task
    test: int = Field(200, ge=1)
    finetune: int = Field(200, ge=1)  # frame control (original regime, a fresh set)
    control_train: int = Field(200, ge=1)  # global control
    control_test: int = Field(200, ge=1)
    seed: int = 0
    out: ProjectPath = "data/nbody"

    @model_validator(mode="after")
    def _source(self):
        if self.source == "md17" and not self.md17:
            raise ValueError("source md17 needs `md17`: the path of an MD17-style .npz")
        if any(s <= 0 for s in self.control_strengths):
            raise ValueError(f"control_strengths must be positive, got {self.control_strengths}")
        return self


@dataclass(frozen=True)
class Trajectories:
    """One split: positions and velocities (S, T, n, 3), charges (S, n), edge attributes (S, n, n),
    and the global control (S,) where the set has one."""

    loc: np.ndarray
    vel: np.ndarray
    charges: np.ndarray
    edges: np.ndarray
    control: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.loc)


# ---------------------------------------------------------------- simulator


def simulate_charged(n_sims: int, cfg: NBodyConfig, rng: np.random.Generator,
                     strengths: np.ndarray | None = None) -> Trajectories:
    """`n_sims` trajectories of `cfg.frames` frames, all integrated together; `strengths` (n_sims,)
    per trajectory, else cfg.strength for all."""
    n, steps = cfg.n_particles, cfg.frames * cfg.sample_every
    k = (np.full(n_sims, cfg.strength) if strengths is None else np.asarray(strengths, float))[:, None, None]
    charges = rng.choice([-1.0, 1.0], size=(n_sims, n))
    edges = charges[:, :, None] * charges[:, None, :]  # q_i q_j
    loc = rng.normal(0.0, cfg.loc_std, size=(n_sims, n, 3))
    vel = rng.normal(size=(n_sims, n, 3))
    vel *= cfg.vel_norm / np.linalg.norm(vel, axis=-1, keepdims=True)
    max_force = 0.1 / cfg.dt  # NRI's clip
    off_diagonal = ~np.eye(n, dtype=bool)

    def force(x: np.ndarray) -> np.ndarray:
        diff = x[:, :, None, :] - x[:, None, :, :]  # x_i − x_j
        dist3 = np.linalg.norm(diff, axis=-1) ** 3
        coef = np.where(off_diagonal, k * edges / np.where(off_diagonal, dist3, 1.0), 0.0)
        return np.clip((coef[..., None] * diff).sum(axis=2), -max_force, max_force)  # like charges repel

    def reflect(x: np.ndarray, v: np.ndarray) -> None:
        for sign in (1.0, -1.0):
            out = sign * x > cfg.box
            x[out] = sign * 2 * cfg.box - x[out]
            v[out] = -v[out]

    locs = np.empty((n_sims, cfg.frames, n, 3))
    vels = np.empty_like(locs)
    f = force(loc)
    for step in range(steps):  # leapfrog (kick-drift-kick)
        if step % cfg.sample_every == 0:
            locs[:, step // cfg.sample_every], vels[:, step // cfg.sample_every] = loc, vel
        vel = vel + 0.5 * cfg.dt * f
        loc = loc + cfg.dt * vel
        reflect(loc, vel)
        f = force(loc)
        vel = vel + 0.5 * cfg.dt * f
    return Trajectories(locs.astype(np.float32), vels.astype(np.float32), charges.astype(np.float32),
                        edges.astype(np.float32), None if strengths is None else k[:, 0, 0].astype(np.float32))


# ---------------------------------------------------------------- the .npy layout


def _file(folder: Path, field: str, split: str, suffix: str) -> Path:
    return Path(folder) / f"{field}_{split}_{suffix}.npy"


def write_split(folder: str | Path, split: str, suffix: str, data: Trajectories) -> list[Path]:
    """The split's files in EGNN's layout (positions and velocities as (S, T, 3, n))."""
    arrays = {"loc": data.loc.transpose(0, 1, 3, 2), "vel": data.vel.transpose(0, 1, 3, 2),
              "charges": data.charges[..., None], "edges": data.edges}
    if data.control is not None:
        arrays["strength"] = data.control
    paths = []
    for field, array in arrays.items():
        path = _file(Path(folder), field, split, suffix)
        np.save(path, np.ascontiguousarray(array))
        paths.append(path)
    return paths


def _load(path: Path, field: str, ndim: int) -> np.ndarray:
    if not path.is_file():
        raise NBodyError(f"{path}: missing ({field} of the EGNN .npy layout)")
    try:
        array = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:  # pickled, cut short, or not an array
        raise NBodyError(f"{path}: not a .npy array: {one_line(err)}") from None
    if array.ndim != ndim:
        raise NBodyError(f"{path}: {field}: expected {ndim} dimensions, got shape {array.shape}")
    if not np.issubdtype(array.dtype, np.floating):
        raise NBodyError(f"{path}: {field}: expected floats, got dtype {array.dtype}")
    if not np.isfinite(array).all():
        bad = np.argwhere(~np.isfinite(array))[0]
        raise NBodyError(f"{path}: {field}: non-finite value (NaN or inf) at index {tuple(int(i) for i in bad)}")
    return array.astype(np.float32)


def load_split(folder: str | Path, split: str, suffix: str, min_frames: int = 1,
               control: bool = False) -> Trajectories:
    """A split in EGNN's layout, checked: shapes that agree, finite values, at least `min_frames`
    frames (the method's conditioning window plus its horizon); NBodyError names the file and field."""
    folder = Path(folder)
    loc_path, vel_path = _file(folder, "loc", split, suffix), _file(folder, "vel", split, suffix)
    loc, vel = _load(loc_path, "loc", 4), _load(vel_path, "vel", 4)
    charges_path, edges_path = _file(folder, "charges", split, suffix), _file(folder, "edges", split, suffix)
    charges, edges = _load(charges_path, "charges", 3), _load(edges_path, "edges", 3)
    S, T, d, n = loc.shape
    if d != 3:
        raise NBodyError(f"{loc_path}: loc: expected (trajectories, frames, 3, particles), got shape {loc.shape}")
    if vel.shape != loc.shape:
        raise NBodyError(f"{vel_path}: vel: shape {vel.shape} differs from loc's {loc.shape}")
    if charges.shape != (S, n, 1):
        raise NBodyError(f"{charges_path}: charges: expected shape {(S, n, 1)}, got {charges.shape}")
    if edges.shape != (S, n, n):
        raise NBodyError(f"{edges_path}: edges: expected shape {(S, n, n)}, got {edges.shape}")
    if T < min_frames:
        raise NBodyError(f"{loc_path}: loc: trajectories of {T} frames, shorter than the {min_frames} the "
                         f"conditioning window and horizon need")
    strength = None
    if control:
        strength_path = _file(folder, "strength", split, suffix)
        strength = _load(strength_path, "strength", 1)
        if strength.shape != (S,):
            raise NBodyError(f"{strength_path}: strength: expected shape {(S,)}, got {strength.shape}")
    return Trajectories(loc.transpose(0, 1, 3, 2).copy(), vel.transpose(0, 1, 3, 2).copy(), charges[..., 0],
                        edges, strength)


# ---------------------------------------------------------------- MD17


def load_md17_npz(path: str | Path, span: int, stride: int) -> Trajectories:
    """Windows of `span` frames (every `stride` frames) of an MD17-style trajectory `.npz` (`R`
    (frames, atoms, 3), `z` (atoms,)): charges are atomic numbers, edges fully connected with
    attribute 1 (the paper's 3-bond-hop graph needs bonds MD17 does not ship: a reduction),
    velocities frame differences (the first frame repeats the second's)."""
    path = Path(path)
    if not path.is_file():
        raise NBodyError(f"{path}: no such MD17 .npz file")
    try:
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in ("R", "z") if k not in z.files]
            if missing:
                raise NBodyError(f"{path}: field {missing[0]!r} missing (has {', '.join(z.files)})")
            R, Z = np.asarray(z["R"], dtype=np.float64), np.asarray(z["z"])
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as err:  # pickled, cut short, or not a zip
        raise NBodyError(f"{path}: not a readable .npz: {one_line(err)}") from None
    if R.ndim != 3 or R.shape[2] != 3:
        raise NBodyError(f"{path}: R: expected (frames, atoms, 3), got shape {R.shape}")
    if Z.shape != (R.shape[1],):
        raise NBodyError(f"{path}: z: expected ({R.shape[1]},) atomic numbers, got shape {Z.shape}")
    if not np.isfinite(R).all():
        bad = np.argwhere(~np.isfinite(R))[0]
        raise NBodyError(f"{path}: R: non-finite value (NaN or inf) at index {tuple(int(i) for i in bad)}")
    if R.shape[0] < span:
        raise NBodyError(f"{path}: R: a trajectory of {R.shape[0]} frames, shorter than the {span} the "
                         f"conditioning window and horizon need")
    starts = np.arange(0, R.shape[0] - span + 1, stride)
    loc = np.stack([R[s:s + span] for s in starts])
    vel = np.diff(loc, axis=1, prepend=loc[:, :1])
    vel[:, 0] = vel[:, 1]
    n = R.shape[1]
    charges = np.broadcast_to(Z.astype(np.float32), (len(starts), n)).copy()
    edges = np.ones((len(starts), n, n), np.float32)
    return Trajectories(loc.astype(np.float32), vel.astype(np.float32), charges, edges)


def subset(data: Trajectories, index: np.ndarray) -> Trajectories:
    return Trajectories(data.loc[index], data.vel[index], data.charges[index], data.edges[index],
                        None if data.control is None else data.control[index])


# ---------------------------------------------------------------- the stage's folder


def nbody_fingerprint(cfg: NBodyConfig) -> str:
    """What the folder's contents depend on (not where it is written)."""
    from paperline.io import json_digest

    return json_digest(cfg.model_dump(exclude={"out"}))


def build_nbody(cfg: NBodyConfig, out: str | Path) -> dict:
    """Write the stage's folder (atomically): simulated sets (the original task's train/test, the
    frame-control fine-tuning set, the global-control set with a strength per trajectory), or the
    windows of an MD17 trajectory split into train/test/finetune (no global-control set: MD17 has no
    global label). Returns the record also written as nbody.json."""
    import time

    from paperline.io import atomic_dir, write_json

    start = time.perf_counter()
    rng = np.random.default_rng(cfg.seed)
    sizes = {"train": cfg.train, "test": cfg.test, FINETUNE_SPLIT: cfg.finetune}
    with atomic_dir(out) as tmp:
        counts = {}
        if cfg.source == "simulate":
            for split, size in sizes.items():
                write_split(tmp, split, PRETRAIN_SUFFIX, simulate_charged(size, cfg, rng))
                counts[f"{split}_{PRETRAIN_SUFFIX}"] = size
            for split, size in zip(GLOBAL_SPLITS, (cfg.control_train, cfg.control_test)):
                strengths = rng.choice(np.asarray(cfg.control_strengths, float), size=size)
                write_split(tmp, split, GLOBAL_SUFFIX, simulate_charged(size, cfg, rng, strengths))
                counts[f"{split}_{GLOBAL_SUFFIX}"] = size
        else:
            assert cfg.md17 is not None  # the config's validator requires it for source md17
            data = load_md17_npz(cfg.md17, cfg.frames, cfg.md17_stride)
            order = rng.permutation(len(data))
            if len(order) < sum(sizes.values()):
                raise NBodyError(f"{cfg.md17}: {len(order)} windows of {cfg.frames} frames (stride "
                                 f"{cfg.md17_stride}); train + test + finetune need {sum(sizes.values())}")
            start_at = 0
            for split, size in sizes.items():
                write_split(tmp, split, PRETRAIN_SUFFIX, subset(data, order[start_at:start_at + size]))
                counts[f"{split}_{PRETRAIN_SUFFIX}"] = size
                start_at += size
        record = {"source": cfg.source, "md17": cfg.md17, "frames": cfg.frames, "trajectories": counts,
                  "fingerprint": nbody_fingerprint(cfg), "seconds": time.perf_counter() - start}
        write_json(Path(tmp) / RECORD_FILE, record)
    return record
