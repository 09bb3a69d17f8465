"""The digits experiment: real data, every optimizer trains, a stopped run resumes to the same
result, state sizes counted from the optimizers equal the formulas, invalid parameters fail
naming the key, the summary picks the best lr per optimizer."""
from __future__ import annotations

import pytest
import torch

from paperline.config import ParamsError, load_method_config
from paperline.data.digits import digits_file
from paperline.methods.sumo.config import SumoConfig
from paperline.methods.sumo.data import load_digits_split
from paperline.methods.sumo.summary import best_lr, method_metrics, summarize
from paperline.methods.sumo.train import digits_step_times, lr_factor, train_one

NAMES = ["adamw", "galore_adamw", "muon", "sumo", "sumo_ns"]
CPU = torch.device("cpu")


def _cfg(**kw) -> SumoConfig:
    base = dict(optimizers=NAMES, lr_grid={"adamw": [1e-2], "galore_adamw": [0.1], "muon": [0.03],
                                           "sumo": [0.3], "sumo_ns": [0.3]},
                seeds=[0], steps=40, batch_size=32, hidden_sizes=[16, 16], rank=4, update_period=10,
                log_every=10, checkpoint_every=10, timing_rounds=1, timing_steps=2)
    return SumoConfig(**(base | kw))


@pytest.fixture(scope="module")
def digits():
    return load_digits_split(0.2, 0)


def test_digits_are_the_real_scikit_learn_set(digits):
    assert digits_file().name == "digits.csv.gz" and digits_file().exists()
    assert len(digits.y_train) + len(digits.y_test) == 1797
    assert digits.x_train.shape[1] == 64 and set(digits.y_test.tolist()) == set(range(10))
    assert abs(float(digits.x_train.mean())) < 1e-4  # standardized with training statistics


@pytest.mark.parametrize("name", NAMES)
def test_every_optimizer_trains_and_counts_its_state_as_the_formula(name, digits):
    cfg = _cfg()
    result = train_one(cfg, digits, name, cfg.lr_grid[name][0], 0, CPU)
    losses = result["history"]["train_loss"]
    assert not result["diverged"] and losses[-1] < 0.8 * losses[0]
    assert result["state_floats"] == result["state_floats_formula"]
    assert result["state_bytes"] == 4 * result["state_floats"]


def test_a_stopped_run_resumes_to_the_same_result(digits, tmp_path):
    cfg = _cfg(steps=30)
    clean = train_one(cfg, digits, "sumo", 0.3, 0, CPU)
    path = tmp_path / "seed0.pt"
    assert train_one(cfg, digits, "sumo", 0.3, 0, CPU, checkpoint_path=path, stop_after=15) == {}
    resumed = train_one(cfg, digits, "sumo", 0.3, 0, CPU, checkpoint_path=path)
    for key in ("train_loss", "test_loss", "test_accuracy"):
        assert resumed["history"][key] == clean["history"][key]
    assert resumed["final_train_loss"] == clean["final_train_loss"]
    again = train_one(cfg, digits, "sumo", 0.3, 0, CPU, checkpoint_path=path)  # finished: read back
    assert again["final_train_loss"] == clean["final_train_loss"]


def test_warmup_then_cosine_schedule():
    cfg = _cfg(steps=100, warmup_fraction=0.1, min_lr_ratio=0.1)
    assert lr_factor(cfg, 0) == pytest.approx(0.1) and lr_factor(cfg, 9) == pytest.approx(1.0)
    assert lr_factor(cfg, 10) == pytest.approx(1.0) and lr_factor(cfg, 100) == pytest.approx(0.1)
    assert lr_factor(_cfg(lr_schedule="constant"), 37) == 1.0


def test_step_times_are_reported_against_adamw(digits):
    times = digits_step_times(_cfg(), digits, CPU)
    assert set(times) == set(NAMES) and times["adamw"]["step_time_vs_adamw"] == 1.0
    assert times["sumo"]["state_bytes_vs_adamw"] < 1.0


@pytest.mark.parametrize("override, key", [
    ("rank=17", "rank 17 is larger than the smallest weight matrix side"),
    ("lr_grid.sumo=[0.0]", "lr_grid.sumo.0"),
    ("lr_grid.adamw=[-1e-3]", "lr_grid.adamw.0"),
    ("steps=0", "steps"),
    ("limiter=1.0", "limiter"),
    ("optimizers=[sumo, lion]", "optimizers.1"),
    ("lr_grd={}", "lr_grd: unknown parameter"),
])
def test_invalid_parameters_fail_naming_the_key(override, key):
    params = {"sumo": {"profiles": {"tiny": _cfg().model_dump()}}}
    with pytest.raises(ParamsError, match=key.replace("[", r"\[")):
        load_method_config(SumoConfig, params, "sumo", "tiny", [override])


def test_summary_picks_the_lr_with_the_lowest_loss_curve_and_skips_diverged():
    def run(name, lr, auc, diverged=False):
        return {"optimizer": name, "lr": lr, "diverged": diverged, "mean_train_loss": None if diverged else auc,
                "final_train_loss": None if diverged else auc / 10, "final_test_accuracy": None if diverged else 0.9,
                "state_floats": 10, "state_floats_formula": 10, "state_bytes": 40 if name == "adamw" else 10,
                "limiter_fraction": None}
    runs = [run("adamw", 1e-3, 0.5), run("adamw", 1e-2, 0.2), run("adamw", 1e-1, 0.0, diverged=True),
            run("sumo", 0.1, 0.3), run("sumo", 0.3, 0.4), run("muon", 0.1, 0.0, diverged=True)]
    theory = {"kappa": [1.0, 1e6], "rank": 4, "cols": 32, "svd_error_max": [1e-7, 1e-2],
              "svd_error_mean": [1e-7, 1e-2], "ns5_error_mean": [0.3, 0.7]}
    rows = summarize(runs, None, ["adamw", "sumo", "muon"])
    assert rows["adamw"]["best_lr"] == 1e-2 and rows["adamw"]["diverged_runs"] == 1
    assert rows["sumo"]["best_lr"] == 0.1 and rows["sumo"]["lr_at_grid_edge"]
    assert rows["sumo"]["state_bytes_vs_adamw"] == 0.25
    assert best_lr({0.1: {"diverged": 1}}) is None

    metrics = method_metrics(rows, runs, theory, "tiny")  # validated: a muon that always diverged is a null row
    assert metrics.baseline == "adamw" and metrics.primary_metric == "mean_train_loss"
    assert metrics.rows["muon"]["best_lr"] is None and metrics.rows["muon"]["mean_train_loss"] is None
    assert metrics.headline["ns5_error_at_kappa_1e6"] == 0.7
    assert metrics.tables["newton_schulz_vs_svd"]["kappa_1e6"] == {"kappa": 1e6, "svd_error_max": 1e-2,
                                                                   "svd_error_mean": 1e-2, "ns5_error_mean": 0.7}
    assert metrics.details["by_lr"]["adamw"]["0.1"]["diverged"] == 1


@pytest.mark.parametrize("profile", ["tiny", "smoke", "paper"])
def test_every_profile_in_its_params_file_validates(profile):
    from paperline.config import read_params
    from tests.conftest import CHECKOUT

    _, cfg = load_method_config(SumoConfig, read_params(CHECKOUT / "params"), "sumo", profile)
    assert cfg.task == ("llama_c4" if profile == "paper" else "digits_mlp")
    if profile == "paper":  # the GaLore LLaMA-60M protocol
        assert (cfg.lm.model_size, cfg.rank, cfg.update_period, cfg.alpha, cfg.steps, cfg.batch_size,
                cfg.lm.max_length) == ("60m", 128, 200, 0.25, 10000, 512, 256)
