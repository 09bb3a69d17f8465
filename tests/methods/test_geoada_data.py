"""The nbody data: the vectorised charged-particle simulator (its physics and its determinism), the
EGNN .npy layout written and read back, MD17-style .npz windows by path (split by contiguous time
blocks, on the 3-bond-hop graph), the stage's folder, and the
refused inputs (a wrong shape, a NaN, a trajectory shorter than the window, a missing field), each
naming the file and the field."""
from __future__ import annotations

import numpy as np
import pytest

from paperline.data.nbody import (
    FRAME_SUFFIX,
    GLOBAL_SUFFIX,
    MD17_FRAME_SUFFIX,
    MD17_SUFFIX,
    PRETRAIN_SUFFIX,
    RECORD_FILE,
    NBodyConfig,
    NBodyError,
    bond_graph,
    build_nbody,
    hop_graph,
    load_md17_npz,
    load_split,
    simulate_charged,
    split_md17,
    write_split,
)


def _cfg(**kw) -> NBodyConfig:
    return NBodyConfig(**({"frames": 6, "train": 6, "test": 3, "finetune": 3, "control_train": 4,
                           "control_test": 2, "frame_train": 2, "frame_test": 2} | kw))


def test_simulator_shapes_charges_and_physics():
    cfg = _cfg(frames=8)
    a = simulate_charged(16, cfg, np.random.default_rng(0))
    b = simulate_charged(16, cfg, np.random.default_rng(0))
    assert np.array_equal(a.loc, b.loc)  # seeded
    assert a.loc.shape == a.vel.shape == (16, 8, 5, 3) and a.charges.shape == (16, 5)
    assert set(np.unique(a.charges)) <= {-1.0, 1.0}
    assert np.array_equal(a.edges, a.charges[:, :, None] * a.charges[:, None, :])
    assert np.allclose(np.linalg.norm(a.vel[:, 0], axis=-1), cfg.vel_norm, atol=1e-6)
    assert np.abs(a.loc).max() <= cfg.box + 1e-5
    # positions integrate the velocities: a frame's displacement ≈ the mean velocity × 100 dt
    step = cfg.sample_every * cfg.dt
    moved = a.loc[:, 1:] - a.loc[:, :-1]
    mid = 0.5 * (a.vel[:, 1:] + a.vel[:, :-1]) * step
    bounced = np.abs(a.loc).max(axis=(1, 2, 3)) > cfg.box - 0.5  # wall reflections break the relation
    assert np.median(np.abs(moved - mid)[~bounced]) < 0.02
    # two like charges alone, at rest, repel; opposite ones attract
    two = _cfg(n_particles=2, frames=3, vel_norm=0.0)
    for q, sign in ((1.0, 1), (-1.0, -1)):
        rng = np.random.default_rng(1)
        out = simulate_charged(64, two, rng)
        same = out.charges[:, 0] * out.charges[:, 1] == q
        d = np.linalg.norm(out.loc[:, :, 0] - out.loc[:, :, 1], axis=-1)
        assert (np.sign(d[same, -1] - d[same, 0]) == sign).all()
    strong = simulate_charged(4, cfg, np.random.default_rng(0), strengths=np.full(4, 3.0))
    assert np.allclose(strong.control, 3.0) and not np.allclose(strong.loc[:, -1], a.loc[:4, -1])


def test_egnn_layout_round_trip(tmp_path):
    data = simulate_charged(5, _cfg(), np.random.default_rng(0), strengths=np.full(5, 2.0))
    paths = write_split(tmp_path, "train", GLOBAL_SUFFIX, data)
    assert sorted(p.name for p in paths) == sorted(f"{f}_train_{GLOBAL_SUFFIX}.npy"
                                                    for f in ("loc", "vel", "charges", "edges", "strength"))
    assert np.load(tmp_path / f"loc_train_{GLOBAL_SUFFIX}.npy").shape == (5, 6, 3, 5)  # EGNN's (S, T, 3, n)
    assert np.load(tmp_path / f"charges_train_{GLOBAL_SUFFIX}.npy").shape == (5, 5, 1)
    back = load_split(tmp_path, "train", GLOBAL_SUFFIX, min_frames=6, control=True)
    for field in ("loc", "vel", "charges", "edges", "control"):
        assert np.array_equal(getattr(back, field), getattr(data, field)), field


def test_refused_layouts_name_the_file_and_field(tmp_path):
    write_split(tmp_path, "train", PRETRAIN_SUFFIX, simulate_charged(4, _cfg(), np.random.default_rng(0)))
    loc = tmp_path / f"loc_train_{PRETRAIN_SUFFIX}.npy"
    good = np.load(loc)
    with pytest.raises(NBodyError, match=r"loc_train_charged5\.npy: loc: trajectories of 6 frames, shorter than the 9"):
        load_split(tmp_path, "train", PRETRAIN_SUFFIX, min_frames=9)
    bad = good.copy()
    bad[1, 2, 0, 3] = np.nan
    np.save(loc, bad)
    with pytest.raises(NBodyError, match=r"loc_train_charged5\.npy: loc: non-finite value \(NaN or inf\) at index \(1, 2, 0, 3\)"):
        load_split(tmp_path, "train", PRETRAIN_SUFFIX)
    np.save(loc, good.transpose(0, 1, 3, 2))  # (S, T, n, 3): the loader's layout, not the file's
    with pytest.raises(NBodyError, match=r"loc_train_charged5\.npy: loc: expected \(trajectories, frames, 3, particles\)"):
        load_split(tmp_path, "train", PRETRAIN_SUFFIX)
    np.save(loc, good[:, :, :, :4])
    with pytest.raises(NBodyError, match=r"vel_train_charged5\.npy: vel: shape \(4, 6, 3, 5\) differs from loc's"):
        load_split(tmp_path, "train", PRETRAIN_SUFFIX)
    np.save(loc, good)
    np.save(tmp_path / f"charges_train_{PRETRAIN_SUFFIX}.npy", np.ones((4, 5)))
    with pytest.raises(NBodyError, match=r"charges_train_charged5\.npy: charges: expected 3 dimensions, got shape \(4, 5\)"):
        load_split(tmp_path, "train", PRETRAIN_SUFFIX)
    with pytest.raises(NBodyError, match=r"loc_test_charged5\.npy: missing"):
        load_split(tmp_path, "test", PRETRAIN_SUFFIX)


def _md17(path, frames: int = 40, atoms: int = 4, **override) -> None:
    rng = np.random.default_rng(0)
    arrays = {"R": rng.normal(size=(frames, atoms, 3)), "z": np.array([6, 6, 8, 1][:atoms]),
              "E": rng.normal(size=(frames, 1)), "F": rng.normal(size=(frames, atoms, 3))}
    np.savez(path, **(arrays | override))


def test_md17_npz_windows_and_refusals(tmp_path):
    path = tmp_path / "md17_test.npz"
    _md17(path)
    data = load_md17_npz(path, span=10, stride=5)
    assert data.loc.shape == (7, 10, 4, 3) and data.charges.tolist()[0] == [6, 6, 8, 1]
    with np.load(path) as z:
        assert np.allclose(data.loc[1], z["R"][5:15])
        assert np.allclose(data.vel[1, 1:], np.diff(z["R"][5:15], axis=0))
    _md17(path, frames=8)
    with pytest.raises(NBodyError, match=r"md17_test\.npz: R: a trajectory of 8 frames, shorter than the 10"):
        load_md17_npz(path, span=10, stride=5)
    R = np.random.default_rng(0).normal(size=(20, 4, 3))
    R[3, 1, 2] = np.nan
    _md17(path, frames=20, R=R)
    with pytest.raises(NBodyError, match=r"md17_test\.npz: R: non-finite value \(NaN or inf\) at index \(3, 1, 2\)"):
        load_md17_npz(path, span=10, stride=5)
    _md17(path, frames=20, R=np.zeros((20, 4, 2)))
    with pytest.raises(NBodyError, match=r"md17_test\.npz: R: expected \(frames, atoms, 3\), got shape \(20, 4, 2\)"):
        load_md17_npz(path, span=10, stride=5)
    np.savez(path, R=np.zeros((20, 4, 3)))
    with pytest.raises(NBodyError, match=r"md17_test\.npz: field 'z' missing"):
        load_md17_npz(path, span=10, stride=5)


def _chain(atoms: int = 6) -> np.ndarray:
    """A zigzag carbon chain (C–C 1.54 Å, 109.5°): atom i bonded to i ± 1 only."""
    half = np.deg2rad(109.5) / 2
    return np.array([[i * 1.54 * np.sin(half), (i % 2) * 1.54 * np.cos(half), 0.0] for i in range(atoms)])


def test_md17_graph_is_three_bond_hops_of_a_small_generated_molecule():
    chain = _chain(6)
    z = np.full(6, 6)
    bonded = bond_graph(chain, z)
    assert {(int(i), int(j)) for i, j in zip(*np.nonzero(bonded))} == {(i, j) for i in range(6) for j in range(6)
                                                                       if abs(i - j) == 1}
    graph = hop_graph(bonded)
    assert graph.dtype == np.float32 and np.array_equal(graph, graph.T)
    expected = np.array([[1.0 if 0 < abs(i - j) <= 3 else 0.0 for j in range(6)] for i in range(6)])
    assert np.array_equal(graph, expected)  # atoms 0 and 4 are 4 bonds apart: no edge
    # with hydrogens: a methyl H is within 3 hops of the chain's third carbon but not of its fourth
    h = chain[0] + np.array([-0.6, -0.6, 0.6])  # 1.04 Å from C0, far from the rest
    graph = hop_graph(bond_graph(np.vstack([chain, h]), np.append(z, 1)))
    assert graph[6, 0] == graph[6, 2] == 1 and graph[6, 3] == 0
    with pytest.raises(NBodyError, match=r"z: no covalent radius for atomic number\(s\) \[92\]"):
        bond_graph(chain[:2], np.array([6, 92]))


def test_md17_splits_are_contiguous_time_blocks_sharing_no_frame():
    frames, span, stride = 400, 10, 3
    chain = _chain(4)
    # frame f is the chain moved by f along x: a window's frames are read back from its positions
    R = chain[None] + np.arange(frames)[:, None, None] * np.array([100.0, 0, 0])
    sizes = {"train": 40, "finetune": 10, "test": 10}
    splits = split_md17(R, np.full(4, 6), span, stride, sizes)
    assert list(splits) == list(sizes) and all(len(splits[k][0]) == n for k, n in sizes.items())
    seen = {}
    for split, (windows, (first, end)) in splits.items():
        ids = np.rint((windows.loc[:, :, 0, 0] - chain[0, 0]) / 100).astype(int)  # (windows, span) frame ids
        assert (ids >= first).all() and (ids < end).all()
        assert (np.diff(ids, axis=1) == 1).all()  # a window is consecutive frames
        seen[split] = set(ids.ravel().tolist())
        assert np.array_equal(windows.edges[0], hop_graph(bond_graph(chain, np.full(4, 6))))
    assert not seen["test"] & seen["train"] and not seen["test"] & seen["finetune"]
    assert not seen["finetune"] & seen["train"]
    assert min(seen["test"]) - max(seen["finetune"]) > span  # a gap: neighbouring frames are near-copies
    with pytest.raises(NBodyError, match=r"R: 100 frames; train 40, finetune 10, test 10 windows of 10 frames"):
        split_md17(R[:100], np.full(4, 6), span, stride, sizes)


def test_stage_folder_simulated_and_md17(tmp_path):
    record = build_nbody(_cfg(), tmp_path / "nbody")
    assert record["trajectories"] == {"train_charged5": 6, "test_charged5": 3, "finetune_charged5": 3,
                                      f"train_{GLOBAL_SUFFIX}": 4, f"test_{GLOBAL_SUFFIX}": 2,
                                      f"train_{FRAME_SUFFIX}": 2, f"test_{FRAME_SUFFIX}": 2}
    # the frame-control set is a shifted regime: its particles start at frame_vel_norm
    fast = load_split(tmp_path / "nbody", "train", FRAME_SUFFIX)
    assert np.allclose(np.linalg.norm(fast.vel[:, 0], axis=-1), 1.0, atol=1e-5)
    assert (tmp_path / "nbody" / RECORD_FILE).is_file()
    strengths = load_split(tmp_path / "nbody", "train", GLOBAL_SUFFIX, control=True).control
    assert set(strengths.tolist()) <= {0.25, 3.0}
    npz = tmp_path / "md17_small.npz"
    _md17(npz, frames=120, R=_chain(4)[None] + np.random.default_rng(0).normal(0, 0.02, (120, 4, 3)))
    cfg = _cfg(source="md17", md17=str(npz), md17_stride=4, frames=10, md17_train=6, md17_finetune=3, md17_test=3,
               md17_frame_test=2)
    record = build_nbody(cfg, tmp_path / "md")
    assert set(record["trajectories"]) == {f"{s}_{MD17_SUFFIX}" for s in ("train", "finetune", "test")} | {
        f"{s}_{MD17_FRAME_SUFFIX}" for s in ("train", "test")}  # MD17 only
    assert load_split(tmp_path / "md", "train", MD17_SUFFIX, min_frames=10).loc.shape == (6, 10, 4, 3)
    assert record["md17_frame_blocks"] == {"train": [0, 30], "finetune": [40, 58], "test": [68, 86],
                                           "frame_test": [96, 110]}
    frame_train = load_split(tmp_path / "md", "train", MD17_FRAME_SUFFIX)
    assert np.array_equal(frame_train.loc, load_split(tmp_path / "md", "finetune", MD17_SUFFIX).loc)
    assert len(load_split(tmp_path / "md", "test", MD17_FRAME_SUFFIX)) == 2
    with pytest.raises(NBodyError, match=r"md17_small\.npz: R: 120 frames; train 6, finetune 3, test 3, frame_test 2"):
        build_nbody(cfg.model_copy(update={"md17_stride": 8}), tmp_path / "md2")
    # the paper profile's `both`: the charged system's sets beside MD17's, in one folder
    both = build_nbody(cfg.model_copy(update={"source": "both"}), tmp_path / "both")
    assert both["trajectories"] == record["trajectories"] | build_nbody(_cfg(frames=10), tmp_path / "charged")[
        "trajectories"]
    with pytest.raises(ValueError, match="source both needs `md17`"):
        _cfg(source="both")


def test_geoada_reads_the_dataset_it_names(tmp_path):
    from paperline.methods.geoada.config import GeoAdaConfig
    from paperline.methods.geoada.experiment import task_windows

    npz = tmp_path / "md17_small.npz"
    _md17(npz, frames=120, R=_chain(4)[None] + np.random.default_rng(0).normal(0, 0.02, (120, 4, 3)))
    build_nbody(_cfg(source="both", md17=str(npz), md17_stride=4, frames=10, md17_train=6, md17_finetune=3,
                     md17_test=3, md17_frame_test=2), tmp_path / "both")
    shape = dict(cond_frames=3, frame_control_frames=5, horizon=5, eval_trajectories=2)
    md17 = task_windows(tmp_path / "both", GeoAdaConfig(dataset="md17", controls=["frame", "subgraph"], **shape))
    charged = task_windows(tmp_path / "both", GeoAdaConfig(**shape))
    assert md17["original_train"].cond.shape == (6, 3, 4, 3) and charged["original_train"].cond.shape == (6, 3, 5, 3)
    assert md17["frame_train"].cond.shape[1] == 5 and "global_train" in charged and "global_train" not in md17
    assert md17["original_train"].edges[0].tolist() == hop_graph(bond_graph(_chain(4), np.array([6, 6, 8, 1]))).tolist()
    with pytest.raises(ValueError, match="dataset md17 has no global label"):
        GeoAdaConfig(dataset="md17", **shape)
