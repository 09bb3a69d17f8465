"""The NGN-M sweep: problems, runs (divergence, resume), the decades-within-10% count, the
config and the real-data formats (CIFAR python batches, nanoGPT token files)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from paperline.config import ParamsError, load_method_config
from paperline.data.cifar import load_cifar, write_batch
from paperline.data.tokens import open_tokens, sample_windows
from paperline.methods.ngn_m.config import NGNMConfig
from paperline.methods.ngn_m.problems import build_problem
from paperline.methods.ngn_m.summary import TRACE_POINTS, band_decades, method_metrics, summarize, thin, variant_curves
from paperline.methods.ngn_m.sweep import RunResult, VariantResult, run_variant, train_run

SMALL = {"least_squares": {"kind": "least_squares", "batch_size": 16, "epochs": 2},
         "rosenbrock": {"kind": "rosenbrock", "steps": 40},
         "digits": {"kind": "digits", "batch_size": 64, "epochs": 1}}


def config(**extra) -> NGNMConfig:
    return NGNMConfig(**({"c_grid": {"low": -2, "high": 0, "points": 3}, "seeds": [0, 1], "problems": SMALL} | extra))


# ---------------------------------------------------------------- decades within the band

def test_band_decades_counts_the_contiguous_run_around_the_best():
    c = [1e-2, 1e-1, 1e0, 1e1, 1e2, 1e3]
    losses = [2.0, 1.05, 1.0, 1.09, 1.5, 1.02]  # the last is in band but cut off by 1.5
    out = band_decades(c, np.array(losses), higher_is_better=False, band=0.1)
    assert out == {"decades": pytest.approx(2.0), "best": 1.0, "best_c": 1.0, "points_in_band": 4}
    accuracy = [0.1, 0.95, 0.97, 0.9, 0.86, np.nan]  # nan: a diverged seed at that c
    out = band_decades(c, np.array(accuracy), higher_is_better=True, band=0.1)
    assert out["decades"] == pytest.approx(2.0) and out["best"] == 0.97 and out["best_c"] == 1.0
    assert band_decades(c, np.full(6, np.nan), False, 0.1) == {"decades": 0.0, "best": None,
                                                               "best_c": None, "points_in_band": 0}
    assert band_decades(c, np.array([5, 4, 1, 4, 5, 6.0]), False, 0.1)["decades"] == 0.0


def test_summary_rows_are_optimizers_with_per_problem_columns():
    def variant(opt, losses, diverged=()):
        runs = [RunResult("least_squares", opt, c, s, {"loss": math.inf if i in diverged else loss},
                          i in diverged, 10, 0.0)
                for i, (c, loss) in enumerate(zip([0.01, 0.1, 1.0], losses)) for s in (0, 1)]
        return VariantResult("least_squares", "least_squares", opt, [0.01, 0.1, 1.0], runs)

    variants = [variant("sgd", [0.5, 0.3, 9.0], diverged={2}), variant("ngn_m", [0.32, 0.3, 0.31]),
                variant("sgdm", [0.3, 0.5, 9.0], diverged={2})]
    rows = summarize(variants, 0.1)
    assert rows["sgd"]["least_squares_decades"] == 0.0 and rows["sgd"]["diverged_c_points"] == 1
    assert rows["ngn_m"]["least_squares_decades"] == pytest.approx(2.0)
    assert rows["ngn_m"]["least_squares_best_loss"] == pytest.approx(0.3)
    assert rows["ngn_m"]["mean_decades"] == pytest.approx(2.0)
    assert rows["sgdm"]["tuning"] == rows["ngn_m"]["tuning"] == "c grid of 3"

    metrics = method_metrics(rows, variants, 0.1, "tiny")  # validated
    assert (metrics.baseline, metrics.primary_metric, metrics.higher_is_better) == ("sgdm", "mean_decades", True)
    assert metrics.headline == {"ngn_m_minus_sgdm_mean_decades": pytest.approx(2.0), "ngn_family_diverged_c_points": 0,
                                "sgd_sgdm_diverged_c_points": 2, "grid_decades": pytest.approx(2.0)}
    assert metrics.details["band"] == 0.1 and metrics.claims == []
    assert metrics.details["decades_by_seed"]["ngn_m"]["least_squares"] == {"0": pytest.approx(2.0), "1": pytest.approx(2.0)}


def test_mlflow_curves_of_a_sweep_are_thinned_and_keyed_by_c():
    trace = list(range(0, 2000, 2))
    runs = [RunResult("digits", "ngn_m", c, 0, {"loss": 0.1, "accuracy": 0.9}, False, 2000, 0.0,
                      trace_steps=trace, loss=[1.0] * len(trace), gamma=[0.5] * len(trace)) for c in (1e-3, 10.0)]
    curves = variant_curves(VariantResult("digits", "digits", "ngn_m", [1e-3, 10.0], runs))
    assert sorted(curves) == ["diverged_seeds_by_c_index", "final_accuracy_by_c_index", "final_loss_by_c_index",
                              "gamma/c_1.0e-03", "gamma/c_1.0e01", "train_loss/c_1.0e-03", "train_loss/c_1.0e01"]
    assert curves["final_accuracy_by_c_index"] == ([0, 1], [0.9, 0.9])
    steps, values = curves["gamma/c_1.0e01"]
    assert len(steps) == TRACE_POINTS and steps[:2] == [0, 4] and values[0] == 0.5
    assert thin([0, 1, 2], [1.0, None, 3.0]) == ([0, 2], [1.0, 3.0])


# ---------------------------------------------------------------- problems and runs

def test_problems_give_nonnegative_losses_and_seeded_starts():
    cfg = config()
    for name, pcfg in cfg.problems.items():
        a, b = build_problem(name, pcfg, 3), build_problem(name, pcfg, 3)
        assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
        assert torch.equal(torch.as_tensor(a.batch(5)[0]), torch.as_tensor(b.batch(5)[0]))
        assert a.loss(a.batch(0)).item() >= 0 and a.evaluate()["loss"] >= 0
        c = build_problem(name, pcfg, 4)
        assert not all(torch.equal(p, q) for p, q in zip(a.parameters(), c.parameters()))


def test_rosenbrock_optimum_is_the_noise_floor():
    cfg = config()
    problem = build_problem("rosenbrock", cfg.problems["rosenbrock"], 0)
    with torch.no_grad():
        problem.x.fill_(1.0)
    assert problem.evaluate()["loss"] == pytest.approx(0.3 ** 2)


def test_sgd_diverges_at_a_large_step_and_ngn_m_does_not():
    cfg = config()
    pcfg = cfg.problems["least_squares"]
    sgd = train_run(build_problem("least_squares", pcfg, 0), "sgd", 100.0, cfg, seed=0)
    assert sgd.diverged and sgd.final["loss"] == math.inf and sgd.steps < 54
    ngn = train_run(build_problem("least_squares", pcfg, 0), "ngn_m", 100.0, cfg, seed=0)
    assert not ngn.diverged and math.isfinite(ngn.final["loss"]) and ngn.steps == 54
    assert len(ngn.gamma) == 54 and all(g <= min(100.0, cap) * (1 + 1e-9) for g, cap in zip(ngn.gamma, ngn.cap))
    assert ngn.gamma[0] < 100.0 / 10  # the automatic warm-up: γ_k ≪ c where ‖g‖²/f is large


class Killed(Exception):
    pass


def test_a_killed_run_resumes_from_its_checkpoint_to_the_same_result(tmp_path):
    cfg = config()
    pcfg = cfg.problems["digits"]
    whole = train_run(build_problem("digits", pcfg, 1), "ngn_md", 0.1, cfg, seed=1)

    problem = build_problem("digits", pcfg, 1)
    real_loss = problem.loss
    calls = {"n": 0}

    def dying_loss(batch):
        calls["n"] += 1
        if calls["n"] == 15:
            raise Killed
        return real_loss(batch)

    problem.loss = dying_loss
    checkpoint = tmp_path / "run.pt"
    with pytest.raises(Killed):
        train_run(problem, "ngn_md", 0.1, cfg, seed=1, checkpoint_path=checkpoint, checkpoint_every=4)
    assert checkpoint.exists()
    resumed = train_run(build_problem("digits", pcfg, 1), "ngn_md", 0.1, cfg, seed=1,
                        checkpoint_path=checkpoint, checkpoint_every=4)
    assert resumed.final == whole.final and resumed.gamma == whole.gamma and resumed.loss == whole.loss


def test_run_variant_is_deterministic_and_reuses_finished_runs(tmp_path):
    cfg = config(seeds=[0])
    first = run_variant(cfg, "rosenbrock", "ngn_m", tmp_path / "a", root=tmp_path)
    assert len(first.runs) == 3 and len(list((tmp_path / "a").glob("*.json"))) == 3
    again = run_variant(cfg, "rosenbrock", "ngn_m", tmp_path / "b", root=tmp_path)

    def untimed(v):
        return [{k: x for k, x in r.to_dict().items() if k != "seconds"} for r in v.runs]

    assert untimed(again) == untimed(first)
    # the untrained model of the seed: scored like a final model, worse than every trained run here
    assert set(first.initial) == {0} and first.initial[0]["loss"] > max(r.final["loss"] for r in first.runs)
    assert VariantResult.from_dict(first.to_dict()).initial == first.initial
    kept = tmp_path / "a" / "c01_s0.json"
    record = json.loads(kept.read_text())
    kept.write_text(json.dumps(record | {"result": record["result"] | {"seconds": -1.0}}))  # marked, same settings
    (tmp_path / "a" / "c02_s0.json").write_text((tmp_path / "a" / "c00_s0.json").read_text())  # another run's
    reused = run_variant(cfg, "rosenbrock", "ngn_m", tmp_path / "a", root=tmp_path)
    assert reused.runs[1].seconds == -1.0  # read back, not retrained
    assert untimed(reused)[2] == untimed(first)[2]  # a record of other settings: retrained, overwritten
    assert json.loads((tmp_path / "a" / "c02_s0.json").read_text())["result"]["c"] == first.runs[2].c


# ---------------------------------------------------------------- config

def test_config_errors_name_the_key():
    params = {"ngn_m": {"profiles": {"tiny": {"problems": SMALL}}}}
    _, cfg = load_method_config(NGNMConfig, params, "ngn_m", "tiny")
    assert cfg.c_values_for("digits")[0] == pytest.approx(1e-4) and len(cfg.c_values_for("digits")) == 13
    bad = [(["c_grid.points=0"], "c_grid.points"),
           (["c_grid={low: 1, high: -1}"], "must be ≥ low"),
           (["optimizers=[sgd, sgd]"], "repeat"),
           (["optimizers=[lion]"], "optimizers.0"),
           (["problems.digits.hiden=3"], "hiden: unknown parameter"),
           (["problems.x={kind: mnist}"], "problems.x"),
           (["problems={}"], "problems"),
           (["band=1.5"], "band")]
    for overrides, expected in bad:
        params = {"ngn_m": {"profiles": {"tiny": {"problems": {k: dict(v) for k, v in SMALL.items()}}}}}
        with pytest.raises(ParamsError, match=None) as err:
            load_method_config(NGNMConfig, params, "ngn_m", "tiny", overrides)
        assert expected in str(err.value), (overrides, str(err.value))
    with pytest.raises(ValueError, match="depth 6n\\+2"):
        NGNMConfig(problems={"c": {"kind": "cifar", "data_dir": "x", "depth": 21}})


# ---------------------------------------------------------------- real-data formats

def write_cifar10(directory, n=20, seed=0):
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True)
    for f in ["data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch"]:
        write_batch(directory / f, rng.integers(0, 256, (n, 3, 32, 32)), rng.integers(0, 10, n), "cifar10")


def test_cifar_loader_reads_the_python_format_and_rejects_bad_files(tmp_path):
    write_cifar10(tmp_path / "c10")
    X, y, X_test, y_test = load_cifar(tmp_path / "c10", "cifar10")
    assert X.shape == (100, 3, 32, 32) and X.dtype == np.uint8 and y.shape == (100,) and X_test.shape[0] == 20
    images = np.arange(3 * 32 * 32, dtype=np.int64).reshape(1, 3, 32, 32) % 256
    write_batch(tmp_path / "one", images, [7], "cifar100")
    (tmp_path / "c100").mkdir()
    for f in ("train", "test"):
        (tmp_path / "c100" / f).write_bytes((tmp_path / "one").read_bytes())
    X, y, _, _ = load_cifar(tmp_path / "c100", "cifar100")
    assert np.array_equal(X[0], images[0]) and y.tolist() == [7]  # planes R, G, B, row-major
    (tmp_path / "c10" / "test_batch").write_bytes(b"not a pickle")
    with pytest.raises(ValueError, match="test_batch: not a CIFAR python-format batch"):
        load_cifar(tmp_path / "c10", "cifar10")
    with pytest.raises(FileNotFoundError, match="data_batch_1"):
        load_cifar(tmp_path / "missing", "cifar10")


def test_token_files_in_nanogpt_format(tmp_path):
    np.arange(100, dtype=np.uint16).tofile(tmp_path / "train.bin")
    tokens = open_tokens(tmp_path / "train.bin", vocab_size=100, block_size=8)
    x, y = sample_windows(tokens, 4, 8, torch.Generator().manual_seed(0))
    assert x.shape == (4, 8) and torch.equal(y, x + 1)  # targets are the next tokens
    with pytest.raises(ValueError, match="token id 99 ≥ vocab_size 50"):
        open_tokens(tmp_path / "train.bin", vocab_size=50, block_size=8)
    (tmp_path / "odd.bin").write_bytes(b"abc")
    with pytest.raises(ValueError, match="not a whole number of uint16"):
        open_tokens(tmp_path / "odd.bin", 100, 8)


def test_cifar_resnet_and_lm_problems_train_a_few_steps(tmp_path):
    write_cifar10(tmp_path / "c10", n=16)
    np.random.default_rng(0).integers(0, 64, 3000).astype(np.uint16).tofile(tmp_path / "train.bin")
    np.random.default_rng(1).integers(0, 64, 1000).astype(np.uint16).tofile(tmp_path / "val.bin")
    cfg = NGNMConfig(problems={
        "c10": {"kind": "cifar", "data_dir": str(tmp_path / "c10"), "depth": 8, "epochs": 1,
                "batch_size": 16, "eval_batch_size": 40},
        "lm": {"kind": "text_lm", "data_dir": str(tmp_path), "vocab_size": 64, "n_layer": 1, "n_head": 2,
               "n_embd": 16, "block_size": 8, "batch_size": 4, "steps": 4, "eval_batches": 2}})
    for name in ("c10", "lm"):
        problem = build_problem(name, cfg.problems[name], 0)
        run = train_run(problem, "ngn_m", 0.5, cfg, seed=0)
        assert not run.diverged and run.steps == problem.total_steps and len(run.gamma) == run.steps
        assert all(0 < g <= 0.5 for g in run.gamma)
    c10 = build_problem("c10", cfg.problems["c10"], 0)
    images, labels = c10.batch(0)
    assert images.shape == (16, 3, 32, 32) and images.dtype == torch.uint8 and labels.shape == (16,)
    assert set(c10.evaluate()) == {"loss", "test_loss", "accuracy"}


def test_cifar_augmentation_is_a_padded_crop_and_flip_fixed_by_seed_and_epoch(tmp_path):
    write_cifar10(tmp_path / "c10", n=16)
    cfg = NGNMConfig(problems={"c10": {"kind": "cifar", "data_dir": str(tmp_path / "c10"), "depth": 8,
                                       "epochs": 2, "batch_size": 16}})
    problem = build_problem("c10", cfg.problems["c10"], 0)
    images, _ = problem.batch(0)
    idx = problem.batches.indices(0)
    dy, dx, flip = (t[idx] for t in problem._augmentation(0))
    padded = torch.nn.functional.pad(problem.X[idx], (4, 4, 4, 4))
    for i in range(len(idx)):
        crop = padded[i, :, dy[i]:dy[i] + 32, dx[i]:dx[i] + 32]
        assert torch.equal(images[i], crop.flip(2) if flip[i] else crop)
    assert 0 < int(flip.sum()) < 16 and len(set(dy.tolist())) > 1
    again = build_problem("c10", cfg.problems["c10"], 0)
    assert torch.equal(again.batch(0)[0], images)  # a resumed run sees the same minibatch
    assert not torch.equal(again.batch(problem.steps_per_epoch)[0], images)  # a new epoch, new crops
