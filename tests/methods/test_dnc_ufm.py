import copy
import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from paperline.config import ParamsError, validate
from paperline.methods.dnc import plots, theory, ufm
from paperline.methods.dnc.config import DNCConfig
from paperline.methods.dnc.summary import summarize
from paperline.train import checkpoint
from paperline.train.checkpoint import load_checkpoint

CPU = torch.device("cpu")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def one_thread():
    """These tiny matmuls run several times slower with 2 intra-op threads than with 1."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny(**overrides) -> DNCConfig:
    values = dict(classes=[4], depths=[1], width_multipliers=[2], samples_per_class=3, seeds=[0, 1], lam=5e-3,
                  init="orthogonal", init_scale=1.0, adam_steps=300, adam_lr=1e-2, gd_steps=100, gd_lr=0.05,
                  checkpoint_every=50, log_every=20)
    return DNCConfig(**{**values, **overrides})


@pytest.mark.parametrize("activation", ["linear", "relu"])
@pytest.mark.parametrize("L", [1, 2, 3])
def test_manual_gradient_matches_autograd(activation, L):
    K, n, width, lam = 3, 2, 5, 1e-2
    cfg = tiny(classes=[K], samples_per_class=n, seeds=[0, 1, 2], init="normal", init_scale=0.7)
    theta = ufm.init_theta(cfg, K, L, width, CPU)
    shapes, labels = ufm.param_shapes(K, L, width, K * n), ufm.labels_for(K, n, CPU)
    obj, grad = ufm.objective_and_grad(theta, shapes, labels, lam, activation)
    leaf = theta.clone().requires_grad_(True)
    obj_ref, _ = ufm.objective(ufm.unflatten(leaf, shapes), labels, lam, activation)
    grad_ref, = torch.autograd.grad(obj_ref.sum(), leaf)
    assert torch.allclose(obj, obj_ref, rtol=1e-13, atol=0)
    assert torch.allclose(grad, grad_ref, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("L", [1, 3])
def test_balanced_dnc_is_a_critical_point_at_f_dnc_star(L):
    K, n, width, lam = 4, 3, 6, 5e-3
    f_star, c_star = theory.f_dnc_min(K, n, L, lam)
    H1, weights = theory.balanced_factorization(theory.dnc_Z(K, n, c_star), L, width)
    theta = torch.cat([p.flatten() for p in [H1, *weights]])[None]
    obj, grad = ufm.objective_and_grad(theta, ufm.param_shapes(K, L, width, K * n), ufm.labels_for(K, n, CPU),
                                       lam, "linear")
    assert float(obj[0]) == pytest.approx(f_star, rel=1e-10)
    assert float(grad.norm()) < 1e-7


def test_trained_one_layer_ufm_reaches_dnc():
    cfg = tiny(samples_per_class=5, seeds=[0, 1, 2], adam_steps=1500)
    result = ufm.train_ufm_group(cfg, 4, 1, 8, CPU)
    f_star, _ = theory.f_dnc_min(4, 5, 1, cfg.lam)
    assert result.f_dnc_star == f_star
    for seed in result.seeds:
        assert seed["objective"] == pytest.approx(f_star, rel=1e-4)
        assert seed["rank_1e-3"] == 3 and seed["is_dnc"]
        assert seed["nc1_trace"] < 1e-6 and seed["nc2_etf"] < 1e-3 and seed["nc3"] < 1e-3
    assert result.Z.shape == (3, 4, 20)


def test_same_seed_same_result_and_another_seed_differs():
    first = ufm.train_ufm_group(tiny(), 4, 2, 8, CPU).to_dict()
    assert ufm.train_ufm_group(tiny(), 4, 2, 8, CPU).to_dict() == first
    assert ufm.train_ufm_group(tiny(seed=1), 4, 2, 8, CPU).to_dict()["seeds"][0]["objective"] != \
        first["seeds"][0]["objective"]


def test_a_seed_does_not_depend_on_the_batch_it_trains_in():
    alone = ufm.train_ufm_group(tiny(seeds=[0]), 4, 2, 8, CPU).seeds[0]
    batched = ufm.train_ufm_group(tiny(seeds=[0, 1, 2]), 4, 2, 8, CPU).seeds[0]
    assert batched["objective"] == pytest.approx(alone["objective"], rel=1e-9)
    assert batched["singular_values"] == pytest.approx(alone["singular_values"], rel=1e-6, abs=1e-9)


def test_history_is_logged_every_log_every_steps():
    cfg = tiny(seeds=[0, 1, 2], adam_steps=95, gd_steps=0, log_every=10)
    history = ufm.train_ufm_group(cfg, 4, 1, 8, CPU).history
    assert history["step"] == list(range(0, 95, 10)) + [95]
    assert len(history["objective"]) == 3 and all(len(h) == 11 for h in history["objective"])
    assert history["objective"][0][-1] < history["objective"][0][0]


def test_gd_stops_each_seed_at_the_gradient_tolerance():
    cfg = tiny(seeds=[0, 1], adam_steps=200, gd_steps=5000, gd_lr=2.0, grad_tol=1e-5)
    result = ufm.train_ufm_group(cfg, 4, 1, 8, CPU)
    for seed in result.seeds:
        assert seed["converged"] and seed["grad_norm"] < 1e-5 and 200 <= seed["steps_run"] < 5200


def test_diverged_seeds_are_reported_not_crashed(tmp_path):
    cfg = tiny(adam_steps=0, gd_steps=200, gd_lr=1e4, init="normal", init_scale=1.0)
    result = ufm.train_ufm_group(cfg, 4, 2, 8, CPU)
    assert all(seed["diverged"] and not seed["is_dnc"] for seed in result.seeds)
    json.dumps(result.to_dict(), allow_nan=False)
    entry = summarize(cfg, [result])["K4_L2"]
    assert entry["best_trained_objective"] is None and entry["dnc_fraction"] == 0


def test_relu_ufm_reports_orthogonal_frame_nc2_after_relu():
    result = ufm.train_ufm_group(tiny(activation="relu", adam_steps=600), 4, 3, 8, CPU)
    for seed in result.seeds:
        first, second = seed["layers"][0], seed["layers"][1]
        assert first["nc2"] == first["nc2_etf"] and second["nc2"] == second["nc2_of"]
        assert seed["objective"] < theory.f_dnc(0.0, 4, 3, 3, 5e-3)  # left the trivial Z = 0


def test_a_finished_checkpoint_is_reloaded_not_retrained(tmp_path, monkeypatch):
    path = tmp_path / "group.pt"
    first = ufm.train_ufm_group(tiny(), 4, 2, 8, CPU, checkpoint_path=path, progress=True).to_dict()
    assert load_checkpoint(path)["progress"]["done"]
    calls = []
    real = ufm.objective_and_grad
    monkeypatch.setattr(ufm, "objective_and_grad", lambda *a: calls.append(1) or real(*a))
    assert ufm.train_ufm_group(tiny(checkpoint_every=7, depths=[1, 2]), 4, 2, 8, CPU,
                               checkpoint_path=path).to_dict() == first
    assert len(calls) == 1  # only the final evaluation: grid lists and checkpoint_every do not matter


def test_a_checkpoint_of_another_config_is_not_mixed_in(tmp_path):
    path = tmp_path / "group.pt"
    ufm.train_ufm_group(tiny(), 4, 2, 8, CPU, checkpoint_path=path)
    with pytest.warns(UserWarning, match="another configuration"):
        resumed = ufm.train_ufm_group(tiny(lam=1e-3), 4, 2, 8, CPU, checkpoint_path=path).to_dict()
    assert resumed == ufm.train_ufm_group(tiny(lam=1e-3), 4, 2, 8, CPU).to_dict()
    with pytest.warns(UserWarning):  # another group of the same config
        ufm.train_ufm_group(tiny(lam=1e-3), 4, 2, 12, CPU, checkpoint_path=path)


def test_resume_from_a_checkpoint_in_either_phase_matches_an_uninterrupted_run(tmp_path, monkeypatch):
    cfg = tiny(seeds=[0, 1, 2], adam_steps=120, gd_steps=120, grad_tol=1e-300, checkpoint_every=40)
    path = tmp_path / "group.pt"
    saved = {}
    real_save = checkpoint.save_checkpoint
    # keep a copy of every checkpoint written (on CPU, .cpu() shares the live tensors)
    monkeypatch.setattr(checkpoint, "save_checkpoint", lambda p, state: (
        saved.setdefault(state["progress"]["step"], copy.deepcopy(state)), real_save(p, state)))
    reference = ufm.train_ufm_group(cfg, 4, 2, 8, CPU, checkpoint_path=path).to_dict()
    assert sorted(saved) == [40, 80, 120, 160, 200, 240]
    assert saved[80]["progress"]["phase"] == "adam" and saved[160]["progress"]["phase"] == "gd"
    for step in (80, 160):
        real_save(path, saved[step])
        assert ufm.train_ufm_group(cfg, 4, 2, 8, CPU, checkpoint_path=path).to_dict() == reference


RUNNER = """
import json, sys, torch
from pathlib import Path
torch.set_num_threads(1)
from paperline.methods.dnc.config import DNCConfig
from paperline.methods.dnc.ufm import train_ufm_group
cfg = DNCConfig(**json.loads(sys.argv[1]))
result = train_ufm_group(cfg, 4, 3, 8, torch.device("cpu"), checkpoint_path=Path(sys.argv[2]))
Path(sys.argv[3]).write_text(json.dumps(result.to_dict()))
"""


def test_resume_after_sigkill_is_bit_identical(tmp_path):
    values = dict(classes=[4], depths=[3], width_multipliers=[2], samples_per_class=3, seeds=[0, 1, 2], lam=5e-3,
                  init="orthogonal", init_scale=1.0, adam_steps=600, adam_lr=1e-2, gd_steps=600, gd_lr=1.0,
                  grad_tol=1e-300, checkpoint_every=10, log_every=10)
    ckpt, out = tmp_path / "group.pt", tmp_path / "result.json"
    command = [sys.executable, "-c", RUNNER, json.dumps(values), str(ckpt), str(out)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(command, env=env, cwd=tmp_path)
    reference = ufm.train_ufm_group(DNCConfig(**values), 4, 3, 8, CPU).to_dict()  # uninterrupted, 1 thread too
    deadline = time.time() + 60
    while not ckpt.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL, "the run ended before it could be killed"
    state = load_checkpoint(ckpt)["progress"]
    assert 0 < state["step"] < 1200 and not state["done"] and not out.exists()

    assert subprocess.run(command, env=env, cwd=tmp_path).returncode == 0
    assert load_checkpoint(ckpt)["progress"]["done"]
    assert out.read_text() == json.dumps(reference)


@pytest.mark.parametrize("override,key", [
    ({"colour": 1}, "colour: unknown parameter"),
    ({"lam": -1e-3}, "lam: Input should be greater than or equal to 0"),
    ({"depths": [1, 0]}, "depths.1: Input should be greater than or equal to 1"),
    ({"classes": [4.5]}, "classes.0: Input should be a valid integer"),
    ({"classes": [1]}, "classes.0: Input should be greater than or equal to 2"),
    ({"width_multipliers": [0]}, "width_multipliers.0"),
    ({"seeds": 3}, "seeds: Input should be a valid list"),
    ({"activation": "tanh"}, "activation: Input should be 'linear' or 'relu'"),
    ({"checkpoint_every": 0}, "checkpoint_every"),
])
def test_config_errors_name_the_key(override, key):
    values = {**dict(classes=[4, 10], depths=[1, 2], width_multipliers=[1, 2]), **override}
    with pytest.raises(ParamsError, match=key.replace("(", r"\(")):
        validate(DNCConfig, values, "params/dnc.yaml: dnc.profiles.smoke")
    with pytest.raises(ParamsError, match=r"params/dnc\.yaml: dnc\.profiles\.smoke\." + key.split(":")[0]):
        validate(DNCConfig, values, "params/dnc.yaml: dnc.profiles.smoke")


def test_summary_plots_and_tables(tmp_path):
    cfg = tiny(classes=[3, 4], depths=[1, 2], width_multipliers=[1, 2], seeds=[0, 1], adam_steps=200)
    results = [ufm.train_ufm_group(cfg, K, L, m * K, CPU)
               for K in cfg.classes for L in cfg.depths for m in cfg.width_multipliers]
    summary = summarize(cfg, results)
    assert set(summary) == {"K3_L1", "K3_L2", "K4_L1", "K4_L2"}
    entry = summary["K4_L2"]
    assert set(entry) == {"dnc_objective", "cosine_objective", "best_trained_objective", "numerical_rank_best",
                          "dnc_fraction", "nc1", "nc1_trace", "nc2", "nc3", "dnc_fraction_by_width"}
    pooled = [s for r in results if (r.K, r.L) == (4, 2) for s in r.seeds]
    best = min(pooled, key=lambda s: s["objective"])
    assert entry["best_trained_objective"] == best["objective"]
    assert entry["numerical_rank_best"] == best["rank_1e-3"] and entry["nc3"] == best["nc3"]
    assert entry["dnc_fraction"] == sum(s["is_dnc"] for s in pooled) / 4
    assert set(entry["dnc_fraction_by_width"]) == {4, 8}
    assert entry["dnc_objective"] == theory.f_dnc_min(4, 3, 2, cfg.lam)[0]
    json.dumps(summary, allow_nan=False)

    written = [
        plots.plot_z_spectra(results, 4, tmp_path / "z.png"),
        plots.plot_layer_spectra(results, 4, tmp_path / "layers.png"),
        plots.plot_nc_by_layer(results, 4, tmp_path / "nc.png"),
        plots.plot_rank_vs_depth(summary, tmp_path / "rank.png"),
        plots.plot_gap_vs_depth(summary, tmp_path / "gap.png"),
        plots.plot_dnc_fraction_vs_width(json.loads(json.dumps(summary)), tmp_path / "fraction.png"),
    ]
    for path in written:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rank_csv, gap_csv = plots.write_plot_tables(summary, tmp_path)
    rows = list(csv.DictReader(rank_csv.open()))
    assert [r["depth"] for r in rows] == ["1", "2"] and int(rows[0]["K4"]) == summary["K4_L1"]["numerical_rank_best"]
    rows = list(csv.DictReader(gap_csv.open()))
    assert set(rows[0]) == {"depth", "K3", "K4", "cosine_K3", "cosine_K4"}
    assert float(rows[1]["K4"]) == pytest.approx(entry["best_trained_objective"] - entry["dnc_objective"])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [p.name for p in written] + ["rank_vs_depth.csv", "gap_vs_depth.csv"])  # no temp files left
