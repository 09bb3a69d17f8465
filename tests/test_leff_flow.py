"""The LEFF flow's outputs in the tiny DAG (one Flower simulation: seven methods, two clients, one
round each, one seed; client 1's process is killed in the last method's round), and bad input
refused before any work."""
from __future__ import annotations

import json
import math

import pytest
import torch

from paperline.methods.leff.claims import SPECS
from paperline.metrics import validate_metrics
from tests.conftest import finished_flow_runs, report_rows

METHODS = ["fedavg", "fedlora", "slora", "fedbitfit", "leff_importance", "leff_random", "leff_round_robin"]


def test_tiny_dag_outputs(dag):
    from tasks import track

    path = dag / "results" / "leff.json"
    metrics = validate_metrics(json.loads(path.read_text()), str(path))
    assert sorted(metrics.rows) == sorted(report_rows(dag, "leff")) == sorted(METHODS + ["pretrained"])
    assert (metrics.profile, metrics.baseline, metrics.primary_metric, metrics.higher_is_better) == \
        ("tiny", "fedavg", "test_loss", False)
    for name, row in metrics.rows.items():
        assert math.isfinite(row["test_loss"]) and 0 <= row["test_accuracy"] <= 1 and row["seeds"] == 1, name
        if name == "pretrained":  # the trivial baseline: every run's round 0, scored the same way
            assert row["test_loss"] == pytest.approx(metrics.rows["fedavg"]["initial_test_loss"])
            continue
        assert row["client_gflops"] > 0 and row["trained_params"] > 0 and row["mb_per_round"] > 0, name
    # the killed client: the last method's round went on without it; no other run lost a client
    assert (rows := metrics.rows)["leff_round_robin"]["dropped_clients"] == 1
    assert all(rows[m]["dropped_clients"] == 0 for m in METHODS[:-1])
    assert all(rows[m]["clients"] == 2 for m in METHODS)
    assert rows["fedlora"]["trained_params"] < rows["fedavg"]["trained_params"]
    assert rows["fedbitfit"]["trained_params"] < rows["fedlora"]["trained_params"]
    # SLoRA's one round is its sparse stage: a share of q/k/v/o's entries, its rank-r start built after it
    assert rows["slora"]["trained_params"] < rows["fedavg"]["trained_params"] and 0 < rows["slora"]["slora_svd_kept"] <= 1
    assert rows["leff_importance"]["trained_params"] < rows["fedavg"]["trained_params"]
    head = metrics.headline
    assert head["fault_dropped_clients"] == 1 and head["fault_runs_completed"] is True
    assert not any("claim" in k for k in head)
    claims = {c.name: c for c in metrics.claims}
    assert claims and set(claims) <= {s.name for s in SPECS} and any(c.trivial for c in claims.values())
    assert claims["leff_below_pretrained"].versus == "pretrained" and claims["leff_below_pretrained"].trivial
    assert all(c.seeds == 1 and c.verdict == "inconclusive" for c in claims.values())  # one seed: no verdict
    assert claims["importance_below_random"].method_mean == pytest.approx(rows["leff_importance"]["test_loss"])
    assert head["leff_flops_ratio_vs_fedavg"] == pytest.approx(
        rows["leff_importance"]["client_gflops"] / rows["fedavg"]["client_gflops"])
    blocks = metrics.details["blocks"]["leff_round_robin/seed0"]
    assert blocks == [[0]]  # client 0 (L_i = 1) starts at (round − 1 + client) mod L = 0

    parent, children = finished_flow_runs(dag, "leff")
    assert sorted(r.data.tags["variant"] for r in children) == sorted(METHODS + ["pretrained"])
    for child in children:
        row = rows[child.data.tags["variant"]]
        assert child.data.metrics["test_loss"] == pytest.approx(row["test_loss"])
        if child.data.tags["variant"] != "pretrained":  # each seed's run nested under its method's
            seeds = track.client().search_runs([parent.info.experiment_id],
                                               filter_string=f"tags.mlflow.parentRunId = '{child.info.run_id}'")
            assert [r.info.run_name for r in seeds] == [f"{child.data.tags['variant']}/seed0"]
            assert seeds[0].data.metrics["test_loss"] == pytest.approx(row["test_loss"])
    assert sorted(p.name for p in (dag / "plots" / "leff").glob("*.png")) == ["client_compute.png", "test_loss.png"]
    saved = json.loads((dag / "models" / "leff" / "leff_round_robin" / "seed0" / "run.json").read_text())["result"]
    assert saved["method"] == "leff_round_robin" and saved["seed"] == 0 and len(saved["rounds"]) == 1
    # the killed client is the one dropped, and the round aggregated the other (it had a live actor:
    # the kill waits until it started, wait_for_round_peers), whatever the machine's load
    assert [d["partition"] for d in saved["rounds"][0]["dropped"]] == [1] and saved["rounds"][0]["dropped"][0]["reason"]
    assert [c["partition"] for c in saved["rounds"][0]["clients"]] == [0]


def test_bad_input_is_refused_before_any_work(tmp_path):
    from paperline.methods.leff.config import LEFFConfig
    from paperline.methods.leff.fed import run_federated
    from paperline.nn.causal_lm import CausalLM, CausalLMConfig
    from tasks.leff import data_version

    base = CausalLM(CausalLMConfig(vocab_size=64, hidden_size=16, num_layers=2, num_heads=2, head_dim=8))
    with pytest.raises(ValueError, match="leff.capacities: 3 exceeds the model's 2 layers"):
        run_federated(LEFFConfig(capacities=[1, 3]), base)
    with pytest.raises(ValueError, match="fail_client 4: there are only 2 clients"):
        LEFFConfig(clients=2, fail_client=4)
    with pytest.raises(ValueError, match=r"later_alpha_methods \['fedlora'\] are not in methods"):
        LEFFConfig(methods=["fedavg", "leff_importance"], later_alpha_methods=["fedavg", "fedlora"])
    with pytest.raises(ValueError, match="alphas .* repeat a value"):
        LEFFConfig(alphas=[0.1, 0.1])
    with pytest.raises(ValueError, match=r"seeds: \[0\] listed more than once"):
        LEFFConfig(seeds=[0, 0])
    with pytest.raises(ValueError, match="slora_sparse_rounds 3 is more than the 2 rounds"):
        LEFFConfig(rounds=2, slora_sparse_rounds=3)
    with pytest.raises(ValueError, match="fail_method 'fedsgd' is not one of methods"):
        LEFFConfig(clients=2, fail_client=1, fail_method="fedsgd")
    with pytest.raises(Exception, match="no_such_model"):
        data_version(LEFFConfig(model=str(tmp_path / "no_such_model"), corpus=str(tmp_path)))
    assert torch.is_tensor(base.embed_tokens.weight)


def test_a_killed_flow_keeps_its_finished_runs(tmp_path, monkeypatch):
    """Each finished (method, α, seed) run is saved; a rerun keeps the complete ones and redoes the rest."""
    from paperline.methods.leff.config import LEFFConfig
    from paperline.methods.leff.fed import MethodRun
    from paperline.train.records import finished_unit
    from tasks.leff import _saved, run_path, unit_settings

    monkeypatch.setenv("PAPERLINE_ROOT", str(tmp_path))
    cfg = LEFFConfig(methods=["fedavg", "leff_importance"], rounds=2, seeds=[3, 4])
    done = MethodRun("fedavg", 0.1, {"round": 0, "test_loss": 3.0}, [{"round": 1}, {"round": 2}], clients=8, seed=4)
    partial = MethodRun("leff_importance", 0.1, {"round": 0, "test_loss": 3.0}, [{"round": 1}], clients=8, seed=3)
    other = MethodRun("fedavg", 0.1, {"round": 0, "test_loss": 3.0}, [{"round": 1}, {"round": 2}], clients=8, seed=3)
    for run, settings in ((done, cfg), (partial, cfg), (other, cfg.model_copy(update={"lr": 0.5}))):
        finished_unit(run_path(cfg, run.method, run.alpha, run.seed),
                      unit_settings(settings, run.method, run.alpha, run.seed), run.to_dict)
    assert (tmp_path / "models" / "leff" / "fedavg" / "seed4" / "run.json").is_file()
    assert _saved(cfg) == {("fedavg", 0.1, 4): done}  # not one cut short, nor one of other settings


def test_a_killed_flow_keeps_its_finished_lr_tuning_runs(tmp_path, monkeypatch):
    """Each finished tuning run is saved beside its method's first-seed run, named by its lr; a rerun
    reads back the complete ones of these settings, at exactly the rates they ran at."""
    from paperline.methods.leff.config import LEFFConfig
    from paperline.methods.leff.fed import MethodRun
    from paperline.train.records import write_unit
    from tasks.leff import _saved_tuning, tuning_path, tuning_settings

    monkeypatch.setenv("PAPERLINE_ROOT", str(tmp_path))
    cfg = LEFFConfig(methods=["fedavg", "fedlora"], rounds=2, seeds=[3, 4], lr_grid=[3e-5, 1e-4])
    step = 3e-5 / (1e-4 / 3e-5)  # an extension's rate: not a round number
    runs = [MethodRun("fedavg", 0.1, {}, [{"round": 1}, {"round": 2}], seed=3, lr=lr) for lr in (3e-5, step)]
    cut = MethodRun("fedlora", 0.1, {}, [{"round": 1}], seed=3, lr=1e-4)
    for run in runs + [cut]:
        write_unit(tuning_path(cfg, run.method, run.lr), tuning_settings(cfg, run.method, run.lr), run.to_dict())
    assert tuning_path(cfg, "fedavg", 3e-5) == tmp_path / "models" / "leff" / "fedavg" / "seed3" / "lr3e-05" / "run.json"
    assert _saved_tuning(cfg) == {("fedavg", 3e-5): runs[0], ("fedavg", step): runs[1]}  # not one cut short
    assert _saved_tuning(cfg.model_copy(update={"head_lr": 0.5})) == {}  # nor another config's


def test_later_alphas_and_seeds_run_the_named_methods_and_report_per_alpha():
    """Every method at the first α, `later_alpha_methods` at the others, every seed: the runs, the
    rows (one per (method, α), the mean over seeds, with the pretrained model's), the cost ratios per
    α and the claims at the first α, paired by seed."""
    from paperline.methods.leff.config import LEFFConfig, runs_planned
    from paperline.methods.leff.fed import MethodRun
    from paperline.methods.leff.summary import method_metrics

    cfg = LEFFConfig(methods=["fedavg", "fedlora", "leff_importance", "leff_random"], alphas=[0.1, 50.0],
                     later_alpha_methods=["leff_importance", "fedavg"], rounds=1, seeds=[0, 1, 2])
    first = [("fedavg", 0.1), ("fedlora", 0.1), ("leff_importance", 0.1), ("leff_random", 0.1)]
    assert runs_planned(cfg) == ([(m, a, s) for s in (0, 1, 2) for m, a in first]
                                 + [(m, 50.0, s) for s in (0, 1, 2) for m in ("fedavg", "leff_importance")])
    assert len(runs_planned(cfg.model_copy(update={"later_alpha_methods": None}))) == 24
    loss = {("fedavg", 0.1): 3.0, ("fedlora", 0.1): 3.3, ("leff_importance", 0.1): 3.1, ("leff_random", 0.1): 3.2,
            ("fedavg", 50.0): 2.9, ("leff_importance", 50.0): 2.8}
    runs = {}
    # LEFF's gaps move by 0.002 a seed: a gap the same at every seed has no interval (the sign test)
    step = {"leff_importance": 0.012}
    for m, a, s in runs_planned(cfg):
        client = {"partition": 0, "flops": 2e9 if m == "fedavg" else 1e9, "trained_params": 10, "held_params": 10,
                  "wall_s": 1.0, "bytes_up": 8}
        runs[(m, a, s)] = MethodRun(m, a, {"round": 0, "test_loss": 3.5, "test_accuracy": 0.1},
                                    [{"round": 1, "test_loss": loss[(m, a)] + step.get(m, 0.01) * s, "test_accuracy": 0.2,
                                      "straggler_s": 1.0, "simulated_round_s": 4.0 if m == "fedavg" else 1.0,
                                      "bytes_down": 8, "bytes_up": 8, "server_s": 0.1,
                                      "clients": [client], "dropped": []}], clients=1, seed=s)
    metrics = method_metrics(cfg, runs, "smoke")
    assert list(metrics.rows) == ["pretrained@a0.1", "fedavg@a0.1", "fedlora@a0.1", "leff_importance@a0.1",
                                  "leff_random@a0.1", "pretrained@a50", "fedavg@a50", "leff_importance@a50"]
    assert metrics.baseline == "fedavg@a0.1"
    fedavg = metrics.rows["fedavg@a0.1"]
    assert fedavg["test_loss"] == pytest.approx(3.01) and fedavg["test_loss_std"] == pytest.approx(0.01)
    assert fedavg["seeds"] == 3 and metrics.rows["pretrained@a50"]["test_loss"] == 3.5
    head = metrics.headline
    assert not any("claim" in k for k in head)
    assert head["leff_flops_ratio_vs_fedavg_a50"] == pytest.approx(0.5)
    assert head["leff_simulated_round_time_ratio_vs_fedavg_a0.1"] == pytest.approx(0.25)
    claims = {c.name: c for c in metrics.claims}  # at the first α; fedbitfit and round-robin did not run
    assert set(claims) == {"leff_below_pretrained", "leff_not_above_fedavg", "leff_below_fedlora",
                           "importance_below_random", "leff_client_flops_below_fedavg", "leff_bytes_below_fedavg",
                           "leff_round_time_below_fedavg"}
    assert claims["leff_below_pretrained"].verdict == "shown" and claims["leff_below_pretrained"].trivial
    assert claims["leff_below_pretrained"].effect == pytest.approx(3.112 - 3.5)
    assert claims["leff_below_fedlora"].verdict == "shown" and claims["importance_below_random"].verdict == "shown"
    assert claims["leff_not_above_fedavg"].verdict == "reversed"  # 0.100, 0.102, 0.104 above FedAvg
    flops = claims["leff_client_flops_below_fedavg"]  # half FedAvg's at every seed: no spread, p = 0.25
    assert flops.verdict == "inconclusive" and flops.seeds == 3 and flops.high < 0


def test_the_fault_check_kills_only_after_its_peers_started(tmp_path):
    """The rendezvous: a client with no peers to wait for only marks itself; the failing one returns
    once its peers marked theirs, and gives up after its timeout when one never comes."""
    import threading
    import time

    from paperline.methods.leff.fed import wait_for_round_peers

    assert wait_for_round_peers(str(tmp_path), 1, 0, 0, timeout=5.0) == 0
    later = threading.Timer(0.3, lambda: (tmp_path / "round1-client2").touch())
    later.start()
    started = time.monotonic()
    assert wait_for_round_peers(str(tmp_path), 1, 1, 2, timeout=30.0) == 2  # client 0 above, client 2 later
    assert 0.25 < time.monotonic() - started < 10
    started = time.monotonic()
    assert wait_for_round_peers(str(tmp_path), 2, 1, 1, timeout=0.3) == 0  # round 2: nobody else came
    assert 0.25 < time.monotonic() - started < 10
