"""The causal-LM task of the SUMO comparison: the condition number exact on a matrix built with
known singular values, read from SUMO's moments; every optimizer trains the small LM on a byte-level
corpus of two committed plays with its state as the formula and SUMO's κ sampled every k steps; a
finished run is read back, not retrained; the summary says whether SUMO's held-out loss is below
each baseline's; bad text_lm parameters name the key."""
from __future__ import annotations

import math

import pytest
import torch

from paperline.config import ParamsError, load_method_config
from paperline.data.text_corpus import prepare_corpus, read_slice
from paperline.methods.sumo import text_lm
from paperline.methods.sumo.config import SumoConfig
from paperline.methods.sumo.optimizers import condition_number, moment_condition_numbers
from paperline.methods.sumo.summary import method_metrics, summarize, text_lm_summary
from paperline.methods.sumo.text_lm import train_text_lm
from paperline.optim.sumo import SUMO
from tests.conftest import two_play_slice

CPU = torch.device("cpu")


def test_condition_number_is_sigma_max_over_sigma_min_exactly():
    # U = a 3×3 permutation with signs, V = the first 3 columns of a 5×5 one: the singular values are
    # exactly 50, 5, 0.5 (in fp64), so κ = 100
    U = torch.tensor([[0., 1., 0.], [0., 0., -1.], [1., 0., 0.]], dtype=torch.float64)
    V = torch.eye(5, dtype=torch.float64)[:, [3, 0, 4]]
    m = U @ torch.diag(torch.tensor([50., 5., 0.5], dtype=torch.float64)) @ V.T
    assert condition_number(m) == 100.0
    assert condition_number(m.T.float()) == pytest.approx(100.0, rel=1e-6)  # either orientation, fp32 input
    assert condition_number(torch.diag(torch.tensor([2.0, 0.0]))) == math.inf
    assert condition_number(torch.eye(4)) == 1.0


def test_moment_condition_numbers_read_sumos_moments():
    gen = torch.Generator().manual_seed(0)
    a, b = torch.nn.Parameter(torch.randn(8, 12, generator=gen)), torch.nn.Parameter(torch.randn(10, 6, generator=gen))
    opt = SUMO([{"params": [a, b]}], lr=0.1, rank=3, update_period=5)
    assert moment_condition_numbers(opt, [a, b]) == []  # before the first step: no moment
    for _ in range(3):
        a.grad, b.grad = torch.randn(8, 12, generator=gen), torch.randn(10, 6, generator=gen)
        opt.step()
    values = moment_condition_numbers(opt, [a, b])
    assert values == [condition_number(opt.state[a]["moment"]), condition_number(opt.state[b]["moment"])]
    assert opt.state[a]["moment"].shape == (3, 12) and opt.state[b]["moment"].shape == (3, 10)
    assert all(v >= 1 for v in values)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("sumo_text_lm")
    plays = two_play_slice(root / "plays")
    prepare_corpus(read_slice(plays, 6), root / "corpus", kind="byte", vocab_size=256, val_fraction=0.2, seed=0,
                   source={"kind": "test"})
    return root / "corpus"


def _cfg(corpus, **kw) -> SumoConfig:
    t = dict(corpus=str(corpus), hidden_size=16, num_layers=1, num_heads=2, block_size=16, batch_size=4, steps=12,
             optimizers=["adamw", "galore_adamw", "muon", "sumo"],
             lr_grid={"adamw": [1e-2], "galore_adamw": [3e-2], "muon": [0.03], "sumo": [0.1]},
             rank=4, update_period=5, log_every=2, eval_every=6, eval_windows=4, condition_every=4) | kw
    return SumoConfig(lr_grid={"adamw": [1e-2]}, optimizers=["adamw"], hidden_sizes=[16], rank=4, text_lm=t)


@pytest.mark.parametrize("name", ["adamw", "galore_adamw", "muon", "sumo"])
def test_every_optimizer_trains_the_lm_with_state_as_the_formula(corpus, name):
    cfg = _cfg(corpus)
    r = train_text_lm(cfg, name, cfg.text_lm.lr_grid[name][0], 0, CPU)
    assert not r["diverged"] and r["steps"] == 12 and r["history"]["step"] == [2, 4, 6, 8, 10, 12]
    assert r["final_test_loss"] < math.log(256) + 0.5 and r["eval_history"]["step"] == [6, 12]
    assert r["state_floats"] == r["state_floats_formula"]
    if name == "sumo":  # κ after steps 4, 8, 12, one per projection (4 attention + 3 MLP)
        c = r["condition"]
        assert c["step"] == [4, 8, 12] and all(len(v) == 7 for v in c["per_matrix"])
        assert c["max"] == [max(v) for v in c["per_matrix"]] and all(m >= 1 for m in c["median"])
    else:
        assert r["condition"]["step"] == []


def test_a_finished_run_is_read_back_not_retrained(corpus, tmp_path, monkeypatch):
    cfg = _cfg(corpus, steps=6)
    first = train_text_lm(cfg, "sumo", 0.1, 0, CPU, checkpoint_path=tmp_path / "seed0.pt")

    def no_training(*args, **kwargs):
        raise AssertionError("retrained")
    monkeypatch.setattr(text_lm.lm_loop, "train_lm", no_training)
    again = train_text_lm(cfg, "sumo", 0.1, 0, CPU, checkpoint_path=tmp_path / "seed0.pt")
    assert again == first
    with pytest.raises(AssertionError, match="retrained"):  # another lr: another run
        train_text_lm(cfg, "sumo", 0.3, 0, CPU, checkpoint_path=tmp_path / "seed0.pt")


def test_summary_gives_sumos_held_out_loss_over_each_baseline():
    def run(name, lr, auc, val, kappa=None):
        return {"optimizer": name, "lr": lr, "diverged": False, "mean_train_loss": auc, "final_train_loss": auc,
                "final_test_loss": val, "val_perplexity": math.exp(val), "final_test_accuracy": None,
                "state_floats": 10, "state_floats_formula": 10, "state_bytes": 40 if name == "adamw" else 10,
                "limiter_fraction": None, "step_ms": 1.0, "history": {"step": [1], "train_loss": [auc]},
                "condition": kappa or {"step": [], "median": [], "max": [], "per_matrix": []}}
    kappa = {"step": [10, 20, 30], "median": [2.0, 8.0, 4.0], "max": [5.0, 90.0, 30.0], "per_matrix": []}
    runs = [run("adamw", 1e-3, 5.0, 4.0), run("adamw", 1e-2, 4.5, 4.2),  # best lr by the curve, not the val loss
            run("galore_adamw", 0.1, 4.8, 4.4), run("muon", 0.03, 4.4, 4.0),
            run("sumo", 0.1, 4.6, 4.1, kappa), run("sumo", 0.3, 4.7, 3.9)]
    lm = text_lm_summary(runs, ["adamw", "galore_adamw", "muon", "sumo"])
    rows, head = lm["rows"], lm["headline"]
    assert rows["adamw"]["best_lr"] == 1e-2 and rows["sumo"]["best_lr"] == 0.1 and rows["sumo"]["test_loss"] == 4.1
    assert not any("below" in key for key in head)  # a verdict is a claim, not a headline boolean
    assert head["lm_sumo_over_muon_val_loss"] == pytest.approx(4.1 / 4.0)
    assert head["lm_sumo_over_adamw_val_loss"] == pytest.approx(4.1 / 4.2)
    assert (rows["sumo"]["moment_condition_median"], rows["sumo"]["moment_condition_max"],
            rows["sumo"]["moment_condition_last_max"]) == (4.0, 90.0, 30.0)
    assert head["lm_sumo_moment_condition_max"] == 90.0
    theory = {"kappa": [1.0], "rank": 4, "cols": 32, "svd_error_max": [1e-7], "svd_error_mean": [1e-7],
              "ns5_error_mean": [0.3]}
    digits = [r for r in runs if r["optimizer"] == "adamw"]
    metrics = method_metrics(summarize(digits, None, ["adamw"]), digits, theory, "tiny", lm)
    assert metrics.tables["text_lm"]["sumo"]["best_lr"] == 0.1
    lm_claims = {c.name: c for c in metrics.claims if c.name.startswith("lm_")}
    assert lm_claims["lm_sumo_below_muon_val_loss"].effect == pytest.approx(4.1 - 4.0)
    assert lm_claims["lm_sumo_below_muon_val_loss"].verdict == "inconclusive"  # one seed
    assert sorted(metrics.details["text_lm_by_lr"]["sumo"]) == ["0.1", "0.3"]


@pytest.mark.parametrize("override, key", [
    ("text_lm.rank=100", "text_lm.rank 100 is larger than hidden_size"),
    ("text_lm.condition_every=3", "condition_every 3 must be a multiple of log_every"),
    ("text_lm.hidden_size=15", "not a multiple of num_heads"),
    ("text_lm.lr_grid={adamw: [0.01]}", r"text_lm.lr_grid has no learning rates for \['sumo'\]"),
])
def test_invalid_text_lm_parameters_name_the_key(corpus, override, key):
    params = {"sumo": {"profiles": {"tiny": _cfg(corpus, optimizers=["adamw", "sumo"],
                                                  lr_grid={"adamw": [0.01], "sumo": [0.1]}).model_dump()}}}
    with pytest.raises(ParamsError, match=key):
        load_method_config(SumoConfig, params, "sumo", "tiny", [override])
