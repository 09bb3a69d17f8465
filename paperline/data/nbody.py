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
of each trajectory (the invariant global control). Suffixes: charged5 (the original task),
charged5_strength (global control), charged5_frame (frame control); md17 and md17_frame (MD17's). Loaders return positions as (S, T, n, 3).

MD17 (`.npz` with `R` (frames, atoms, 3) in Å and `z` (atoms,) atomic numbers, as sGDML ships it):
split by contiguous time blocks (train, then the fine-tuning set, then test, `span` frames apart),
each block cut into windows of `span` frames every `stride` frames, so no window of one split shares
a frame with a window of another; velocities are frame differences. The graph is the paper's
3-bond-hop graph: bonds from covalent radii on the first frame, an edge (attribute 1) between atoms
at most 3 bonds apart, none (attribute 0, which the EGTN reads as no edge) elsewhere.
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
# the frame-control set: its own train/test, a shifted regime (faster particles: `frame_vel_norm`),
# none of it seen in pretraining; MD17: the fine-tuning block (train) and a fourth block (test)
FRAME_SUFFIX = "charged5_frame"
MD17_SUFFIX, MD17_FRAME_SUFFIX = "md17", "md17_frame"  # MD17's windows: the original task's, frame control's
# each dataset's sets: the original task's (train/test, and the subgraph fine-tuning set), frame
# control's, global control's (MD17 has no global label)
SUFFIXES = {"charged": {"original": PRETRAIN_SUFFIX, "frame": FRAME_SUFFIX, "global": GLOBAL_SUFFIX},
            "md17": {"original": MD17_SUFFIX, "frame": MD17_FRAME_SUFFIX}}
# split names: the original task's train/test, the subgraph-control fine-tuning set (same regime),
# the global-control and frame-control sets' train/test
PRETRAIN_SPLITS, FINETUNE_SPLIT, GLOBAL_SPLITS = ("train", "test"), "finetune", ("train", "test")
FRAME_SPLITS = ("train", "test")


class NBodyError(DataError):
    """Trajectory files that are not what the method needs; the message names the file and field."""


class NBodyConfig(StrictModel):
    """The `nbody` prep stage: simulate the charged system (the embedded default), read MD17 by path,
    or both (the paper profile: its main benchmark beside MD17)."""

    source: Literal["simulate", "md17", "both"] = "simulate"
    md17: ProjectPath | None = None  # an MD17-style .npz (source md17 or both)
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
    finetune: int = Field(200, ge=1)  # subgraph control (original regime, a fresh set); MD17: frame control's too
    control_train: int = Field(200, ge=1)  # global control
    control_test: int = Field(200, ge=1)
    # frame control: its own sets, simulated with this initial speed (the original task's vel_norm
    # × 2 by default: more motion per frame, where the extra given frames carry more)
    frame_vel_norm: float = Field(1.0, ge=0)
    frame_train: int = Field(200, ge=1)
    frame_test: int = Field(200, ge=1)
    # MD17's windows a split (update (f): 5000/1000/1000), and frame control's test block
    md17_train: int = Field(5000, ge=1)
    md17_test: int = Field(1000, ge=1)
    md17_finetune: int = Field(1000, ge=1)
    md17_frame_test: int = Field(1000, ge=1)
    seed: int = 0
    out: ProjectPath = "data/nbody"

    @model_validator(mode="after")
    def _source(self):
        if self.source in ("md17", "both") and not self.md17:
            raise ValueError(f"source {self.source} needs `md17`: the path of an MD17-style .npz")
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


# covalent radii in Å (Cordero et al. 2008) of the elements MD17's molecules hold (and a few more)
COVALENT_RADII = {1: 0.31, 6: 0.76, 7: 0.71, 8: 0.66, 9: 0.57, 15: 1.07, 16: 1.05, 17: 1.02}
BOND_TOLERANCE = 1.2  # bonded: closer than 1.2 × the sum of the two covalent radii
MD17_HOPS = 3  # the paper's graph: atoms within 3 bond hops


def bond_graph(positions: np.ndarray, z: np.ndarray, tolerance: float = BOND_TOLERANCE) -> np.ndarray:
    """(n, n) bool: the covalent bonds of one conformation (positions (n, 3) in Å, atomic numbers z)."""
    unknown = sorted({int(a) for a in z} - set(COVALENT_RADII))
    if unknown:
        raise NBodyError(f"z: no covalent radius for atomic number(s) {unknown}")
    radii = np.array([COVALENT_RADII[int(a)] for a in z])
    dist = np.linalg.norm(positions[:, None] - positions[None], axis=-1)
    bonded = dist < tolerance * (radii[:, None] + radii[None])
    np.fill_diagonal(bonded, False)
    return bonded


def hop_graph(bonded: np.ndarray, hops: int = MD17_HOPS) -> np.ndarray:
    """(n, n) float32: 1 between two atoms at most `hops` bonds apart, 0 elsewhere and on the diagonal."""
    step = bonded.astype(np.int64) + np.eye(len(bonded), dtype=np.int64)
    reach = np.eye(len(bonded), dtype=np.int64)
    for _ in range(hops):
        reach = np.minimum(reach @ step, 1)
    np.fill_diagonal(reach, 0)
    return reach.astype(np.float32)


def read_md17(path: str | Path, span: int) -> tuple[np.ndarray, np.ndarray]:
    """R (frames, atoms, 3) and z (atoms,) of an MD17-style `.npz`, checked (NBodyError names the
    file and field; at least `span` frames)."""
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
    return R, Z


def md17_windows(R: np.ndarray, Z: np.ndarray, span: int, stride: int, first: int = 0,
                 end: int | None = None) -> Trajectories:
    """Windows of `span` frames every `stride` frames lying within frames [first, end) of R:
    charges the atomic numbers, edges the 3-bond-hop graph of the first frame of R, velocities frame
    differences (a window's first frame repeats the second's)."""
    end = len(R) if end is None else end
    starts = np.arange(first, end - span + 1, stride)
    loc = np.stack([R[s:s + span] for s in starts]) if len(starts) else np.empty((0, span, *R.shape[1:]))
    vel = np.diff(loc, axis=1, prepend=loc[:, :1])
    vel[:, 0] = vel[:, 1] if span > 1 else 0
    n = R.shape[1]
    charges = np.broadcast_to(Z.astype(np.float32), (len(starts), n)).copy()
    edges = np.broadcast_to(hop_graph(bond_graph(R[0], Z)), (len(starts), n, n)).copy()
    return Trajectories(loc.astype(np.float32), vel.astype(np.float32), charges, edges)


def load_md17_npz(path: str | Path, span: int, stride: int) -> Trajectories:
    """Every window of `span` frames (every `stride` frames) of an MD17-style trajectory `.npz`
    (see md17_windows)."""
    R, Z = read_md17(path, span)
    return md17_windows(R, Z, span, stride)


def split_md17(R: np.ndarray, Z: np.ndarray, span: int, stride: int, sizes: dict[str, int]
               ) -> dict[str, tuple[Trajectories, tuple[int, int]]]:
    """{split: (its `size` windows, its frame block [first, end))}: contiguous time blocks in the
    order of `sizes`, each just long enough for its windows, `span` frames apart (consecutive MD
    frames are nearly the same conformation), so no two splits share a frame. NBodyError where R is
    too short."""
    lengths = {split: (size - 1) * stride + span for split, size in sizes.items()}
    need = sum(lengths.values()) + span * (len(sizes) - 1)
    if need > len(R):
        raise NBodyError(f"R: {len(R)} frames; {', '.join(f'{k} {v}' for k, v in sizes.items())} windows of "
                         f"{span} frames every {stride} in contiguous blocks {span} frames apart need {need}")
    out, first = {}, 0
    for split, size in sizes.items():
        end = first + lengths[split]
        windows = md17_windows(R, Z, span, stride, first, end)
        assert len(windows) == size  # the block's length is (size − 1)·stride + span
        out[split] = (windows, (first, end))
        first = end + span
    return out


# ---------------------------------------------------------------- the stage's folder


def nbody_fingerprint(cfg: NBodyConfig) -> str:
    """What the folder's contents depend on (not where it is written)."""
    from paperline.io import json_digest

    return json_digest(cfg.model_dump(exclude={"out"}))


def build_nbody(cfg: NBodyConfig, out: str | Path) -> dict:
    """Write the stage's folder (atomically): simulated sets (the original task's train/test, the
    subgraph-control fine-tuning set, the global-control set with a strength per trajectory, the
    frame-control set in its faster regime; `*_charged5*.npy`), the windows of an MD17 trajectory
    split by contiguous time blocks into train/finetune/test/frame test (`*_md17*.npy`; no
    global-control set: MD17 has no global label), or both. Returns the record also written as nbody.json."""
    import time

    from paperline.io import atomic_dir, write_json

    start = time.perf_counter()
    rng = np.random.default_rng(cfg.seed)
    sizes = {"train": cfg.train, "test": cfg.test, FINETUNE_SPLIT: cfg.finetune}
    with atomic_dir(out) as tmp:
        counts: dict[str, int] = {}
        blocks: dict[str, list[int]] = {}  # MD17: each split's frames [first, end)
        if cfg.source in ("simulate", "both"):
            for split, size in sizes.items():
                write_split(tmp, split, PRETRAIN_SUFFIX, simulate_charged(size, cfg, rng))
                counts[f"{split}_{PRETRAIN_SUFFIX}"] = size
            for split, size in zip(GLOBAL_SPLITS, (cfg.control_train, cfg.control_test)):
                strengths = rng.choice(np.asarray(cfg.control_strengths, float), size=size)
                write_split(tmp, split, GLOBAL_SUFFIX, simulate_charged(size, cfg, rng, strengths))
                counts[f"{split}_{GLOBAL_SUFFIX}"] = size
            faster = cfg.model_copy(update={"vel_norm": cfg.frame_vel_norm})
            for split, size in zip(FRAME_SPLITS, (cfg.frame_train, cfg.frame_test)):
                write_split(tmp, split, FRAME_SUFFIX, simulate_charged(size, faster, rng))
                counts[f"{split}_{FRAME_SUFFIX}"] = size
        if cfg.source in ("md17", "both"):
            assert cfg.md17 is not None  # the config's validator requires it for source md17 and both
            R, Z = read_md17(cfg.md17, cfg.frames)
            try:
                # in time order: the fine-tuning set after the pretraining one, the test set last
                blocks_in_order = {"train": cfg.md17_train, FINETUNE_SPLIT: cfg.md17_finetune, "test": cfg.md17_test,
                                   "frame_test": cfg.md17_frame_test}
                splits = split_md17(R, Z, cfg.frames, cfg.md17_stride, blocks_in_order)
            except NBodyError as err:
                raise NBodyError(f"{cfg.md17}: {err}") from None
            for split, (windows, block) in splits.items():
                blocks[split] = list(block)
                if split == "frame_test":
                    continue
                write_split(tmp, split, MD17_SUFFIX, windows)
                counts[f"{split}_{MD17_SUFFIX}"] = len(windows)
            # frame control: fine-tuned on the fine-tuning block, tested on a block after the test one
            for split, source in zip(FRAME_SPLITS, (FINETUNE_SPLIT, "frame_test")):
                write_split(tmp, split, MD17_FRAME_SUFFIX, splits[source][0])
                counts[f"{split}_{MD17_FRAME_SUFFIX}"] = len(splits[source][0])
        record = {"source": cfg.source, "md17": cfg.md17, "frames": cfg.frames, "trajectories": counts,
                  **({"md17_frame_blocks": blocks} if blocks else {}),
                  "fingerprint": nbody_fingerprint(cfg), "seconds": time.perf_counter() - start}
        write_json(Path(tmp) / RECORD_FILE, record)
    return record
