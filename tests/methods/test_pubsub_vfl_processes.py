"""The parties as OS processes over zmq: a run trains, leaves no process and no bound port behind;
a passive worker killed mid-run does not hang the round (the deadline) and the run records what it
dropped; ports from params are used."""
from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from paperline.methods.pubsub_vfl.config import PubSubVFLConfig
from paperline.methods.pubsub_vfl.data import load


def _cfg(**kw):
    return PubSubVFLConfig(**({"data": {"name": "breast_cancer"}, "epochs": 2, "batch_size": 32, "lr": 0.1,
                               "channels": {"deadline_s": 1.0}, "delay_per_sample_ms": 0.05} | kw))


def _children():
    """The party processes still alive under this one (the session's other children, such as a
    Prefect server, are not ours)."""
    def ours(p):
        try:
            return "paperline.methods.pubsub_vfl.parties" in " ".join(p.cmdline())
        except psutil.Error:
            return False
    return [p for p in psutil.Process().children(recursive=True) if ours(p)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_pubsub_run_with_ports_from_params_leaves_nothing_behind():
    from paperline.methods.pubsub_vfl.train import party_cores, run_variant

    port_a, port_p = _free_port(), _free_port()
    cfg = _cfg(channels={"deadline_s": 1.0, "active_port": port_a, "passive_port": port_p})
    result = run_variant(cfg, load(cfg.data), "pubsub_vfl", 0, workers=(2, 2))
    assert result.metric > 0.9 and result.dropped == 0 and len(result.curve) == 2
    assert result.dead_workers == {"active": [], "passive": []}
    assert set(result.worker_stats["passive"]) == {"0", "1"}
    # every worker pinned to its party's share of the cores (C_a + C_p, split by the workers)
    share = party_cores(cfg, (2, 2), alone=False)
    for party in ("active", "passive"):
        assert [s["cores"] for s in result.worker_stats[party].values()] == [share[party]] * 2
    assert all(0 <= f <= 1 for f in result.idle_fraction.values())
    assert not _children()
    for port in (port_a, port_p):  # nothing listens on the parameter servers' ports any more
        with socket.socket() as s:  # (SO_REUSEADDR: connections in TIME_WAIT do not count)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
            s.listen()


def test_a_killed_worker_does_not_hang_the_round():
    from paperline.methods.pubsub_vfl.train import run_variant

    cfg = _cfg(epochs=4, delay_per_sample_ms=0.3)
    result = run_variant(cfg, load(cfg.data), "pubsub_vfl", 0, workers=(2, 2), kill_passive_after_s=0.15,
                         timeout_s=60)
    assert result.dead_workers["passive"] == [0] and result.dead_workers["active"] == []
    assert result.dropped >= 1  # the killed worker's batches in flight, dropped at the deadline
    # every batch the active party was handed (each epoch's, and any put back again) was trained or dropped
    active = result.worker_stats["active"].values()
    n_batches = math.ceil(len(load(cfg.data).y_train) / cfg.batch_size)
    assert sum(s["steps"] + s["dropped"] for s in active) == cfg.epochs * n_batches + result.reassigned
    assert result.metric > 0.8  # the survivors trained on
    assert not _children()


def test_party_processes_exit_when_the_coordinator_is_killed(tmp_path):
    """SIGKILL leaves the coordinator no chance to clean up: the parties notice and exit, even
    those still starting when it died."""
    script = tmp_path / "coordinator.py"
    script.write_text(
        "from paperline.methods.pubsub_vfl.config import PubSubVFLConfig\n"
        "from paperline.methods.pubsub_vfl.data import load\n"
        "from paperline.methods.pubsub_vfl.train import run_variant\n"
        "cfg = PubSubVFLConfig(data={'name': 'breast_cancer'}, epochs=50, delay_per_sample_ms=0.5)\n"
        "run_variant(cfg, load(cfg.data), 'pubsub_vfl', 0, workers=(1, 1))\n")
    coordinator = psutil.Popen([sys.executable, str(script)], stdout=subprocess.DEVNULL,
                               env=os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    end = time.time() + 30
    while len(parties := coordinator.children()) < 4 and time.time() < end:
        time.sleep(0.1)
    assert len(parties) == 4  # two parameter servers, a worker a party
    coordinator.send_signal(signal.SIGKILL)
    coordinator.wait()
    gone, alive = psutil.wait_procs(parties, timeout=5)
    assert not alive


def test_a_curve_point_is_its_epochs_updates_summed_not_a_workers_view():
    """A point of the curve is the model with every update of a batch of its epoch or an earlier one
    applied (the PS's sum of steps, each tagged with its batch's epoch, also a passive batch still in
    flight when the next epoch began), not the first worker's view at its epoch end: every epoch has
    its point, and the last one is the final model."""
    from paperline.methods.pubsub_vfl.train import run_variant

    cfg = _cfg(epochs=3)
    data = load(cfg.data)
    for variant in ("avfl_ps", "vfl_ps"):
        result = run_variant(cfg, data, variant, 0, workers=(1, 2))
        assert result.dropped == 0 and len(result.curve) == 3
        assert result.curve[-1]["metric"] == pytest.approx(result.metric, abs=1e-9)  # a sum in another order
        assert 0 < result.curve[0]["seconds"] <= result.curve[1]["seconds"] <= result.curve[2]["seconds"]


def test_vfl_ps_scales_its_lr_with_the_batches_it_averages():
    """VFL-PS's barrier step averages the gradients of one batch a worker: at k times the lr it
    learns as fast as one-worker VFL over the same batches, not k times slower."""
    from paperline.methods.pubsub_vfl.train import run_variant

    cfg = _cfg(epochs=1, lr=0.05)
    data = load(cfg.data)
    vfl = run_variant(cfg, data, "vfl", 0, workers=(1, 1))
    vfl_ps = run_variant(cfg, data, "vfl_ps", 0, workers=(3, 3))
    assert vfl_ps.metric == pytest.approx(vfl.metric, abs=0.01)


def test_a_batch_dropped_at_its_deadline_is_put_back_and_trained():
    """A passive party slower than the deadline (1.6 s a forward pass, T_ddl 1 s): the active party
    drops both batches, each goes back once, and by its second turn its embedding has arrived."""
    from paperline.methods.pubsub_vfl.train import run_variant

    cfg = _cfg(epochs=1, batch_size=200, delay_per_sample_ms=8.0, passive_slowdown=1.0, channels={"deadline_s": 1.0})
    result = run_variant(cfg, load(cfg.data), "pubsub_vfl", 0, workers=(1, 1), timeout_s=60)
    (active,) = result.worker_stats["active"].values()
    assert active["dropped"] == 2 and result.reassigned == 2
    assert active["steps"] == 2 and result.retrained == 2  # both trained at their second turn
    assert not _children()


def test_a_dropped_batch_goes_back_once_to_the_worker_that_reports_it():
    from paperline.methods.pubsub_vfl.parties import BatchQueues

    plan = [(e, b) for e in range(2) for b in range(3)]
    shared = BatchQueues(plan, 2, paired=False)
    assert [shared.next(0), shared.next(1)] == [(0, 0, False), (0, 1, False)]
    assert shared.requeue(1, (0, 1)) and not shared.requeue(0, (0, 1))  # once
    assert [shared.next(0) for _ in range(5)] == [(0, 2, False), (1, 0, False), (1, 1, False), (1, 2, False),
                                                  (0, 1, True)]
    assert shared.next(1) is None and shared.empty()
    paired = BatchQueues(plan, 2, paired=True)
    assert paired.next(1) == (0, 1, False) and paired.requeue(1, (0, 1))
    assert [paired.next(1) for _ in range(3)] == [(1, 1, False), (0, 1, True), None]
    assert paired.next(0) == (0, 0, False) and not paired.empty()


def test_two_active_workers_aggregate_every_delta_t_epochs():
    """The semi-asynchronous active party: with ΔT₀ = 1 (ΔT_t = 2 epochs near the target) each of
    two active workers meets the PS mid-run; with ΔT₀ = 5 (ΔT_t ≥ 5) not within 4 epochs."""
    from paperline.methods.pubsub_vfl.train import run_variant

    data = load(_cfg().data)
    syncs = {}
    for delta_t0 in (1, 5):
        cfg = _cfg(epochs=4, delta_t0=delta_t0, delay_per_sample_ms=0.0)
        result = run_variant(cfg, data, "pubsub_vfl", 0, workers=(2, 1))
        syncs[delta_t0] = [s["syncs"] for s in result.worker_stats["active"].values()]
        assert result.metric > 0.9
    assert min(syncs[1]) >= 1 and syncs[5] == [0, 0]
