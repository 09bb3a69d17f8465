"""The coordinator of one training run: writes each party's data, starts the two parameter servers
and their workers as OS processes (`python -m paperline.methods.pubsub_vfl.parties`), hands out
the go, collects the results over zmq, and leaves no process behind (killed on any exit). Then the
test metric per epoch snapshot: wall time to the target, waiting time and CPU utilisation."""
from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import zmq

from paperline.methods.pubsub_vfl import cores, model
from paperline.methods.pubsub_vfl.channels import bind
from paperline.methods.pubsub_vfl.config import PubSubVFLConfig
from paperline.methods.pubsub_vfl.data import PartyData, VFLData, VFLDataError, align
from paperline.methods.pubsub_vfl.parties import MODES


@dataclass
class RunResult:
    variant: str
    seed: int
    workers_active: int
    workers_passive: int
    batch_size: int
    dp_mu: float
    metric: float  # test AUC or RMSE of the final model
    curve: list[dict[str, float]]  # per epoch: {seconds since the go, test metric} (the snapshots: parties.py)
    wall_s: float
    time_to_target_s: float | None
    idle_fraction: dict[str, float]  # per party: waiting / wall, mean over its workers
    cpu_utilisation: float  # process CPU seconds of all workers over their wall seconds
    busy_fraction: float  # compute (incl. the emulated part) over wall, all workers
    dropped: int  # batches dropped at the deadline
    reassigned: int = 0  # dropped batches put back in the queue (once each)
    retrained: int = 0  # reassigned batches the active party then trained
    overflow: int = 0  # channel entries pushed out of a full buffer (p, q) before a worker took them
    dead_workers: dict[str, list[int]] = field(default_factory=dict)
    worker_stats: dict[str, dict] = field(default_factory=dict)
    params: dict | None = None  # the final model: {"active": {...}, "passive": {...}}


class PartyFailure(RuntimeError):
    pass


def _spawn(spec: dict, tmp: Path, name: str) -> subprocess.Popen:
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(spec | {"parent": os.getpid()}))
    # BLAS threads limited before numpy loads in the child: its share of its party's cores
    env = dict(os.environ, **cores.blas_env(spec["blas_threads"]),
               PYTHONPATH=os.pathsep.join(filter(None, [str(Path(__file__).parents[3]), os.environ.get("PYTHONPATH")])))
    return subprocess.Popen([sys.executable, "-m", "paperline.methods.pubsub_vfl.parties", str(path)],
                            env=env, stdin=subprocess.DEVNULL, start_new_session=True)


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    end = time.time() + 3
    for p in procs:
        try:
            p.wait(max(0.0, end - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _settings(cfg: PubSubVFLConfig, task: str, variant: str, seed: int, B: int, dp_mu: float) -> dict:
    """What every process of both parties reads: the same at both, from the same params."""
    ch = cfg.channels
    return {"variant": variant, "seed": seed, "data_seed": seed, "batch_size": B, "epochs": cfg.epochs, "lr": cfg.lr,
            "task": task, "deadline_s": ch.deadline_s, "buffer_embeddings": ch.buffer_embeddings,
            "buffer_gradients": ch.buffer_gradients, "inflight": MODES[variant]["inflight"] or ch.buffer_gradients,
            "delta_t0": cfg.delta_t0, "target_accuracy": cfg.target_metric if task == "classification" else 0.5,
            "delay_per_sample_ms": cfg.delay_per_sample_ms, "active_slowdown": cfg.active_slowdown,
            "passive_slowdown": cfg.passive_slowdown, "dp_mu": dp_mu, "dp_clip": cfg.dp_clip}


def _initial(cfg: PubSubVFLConfig, data: VFLData, seed: int) -> dict:
    """Both parties' initial models from the seed: a party on another machine draws the same."""
    rng = np.random.default_rng(seed)
    init_a = {"bottom": model.init_bottom(rng, data.active_train.x.shape[1], cfg.hidden, cfg.embedding, cfg.bottom_layers),
              "top": model.init_top(rng, cfg.embedding, cfg.top_hidden)}
    return {"active": init_a, "passive": model.init_bottom(rng, data.passive_train.x.shape[1], cfg.hidden,
                                                           cfg.embedding, cfg.bottom_layers)}


def _default_workers(cfg: PubSubVFLConfig, variant: str) -> tuple[int, int]:
    return (1, 1) if variant in ("vfl", "avfl") else (cfg.workers_active, cfg.workers_passive)


def _write_party(tmp: Path, party: str, data: VFLData, init) -> None:
    if party == "active":
        np.savez(tmp / "active.npz", x=data.active_train.x, y=data.y_train)
    else:
        np.savez(tmp / "passive.npz", x=data.passive_train.x)
    (tmp / f"{party}_init.pkl").write_bytes(pickle.dumps(init))


def party_cores(cfg: PubSubVFLConfig, workers: tuple[int, int], alone: bool) -> dict[str, list[int]]:
    """Each party's cores: `total_cores` of this machine's (refused if it has fewer), split C_a + C_p
    when both parties run here; `alone` (the other party on a machine of its own, launch.py): the
    party here takes them all."""
    usable = cores.usable(cfg.total_cores)
    return {"active": usable, "passive": usable} if alone else cores.split(usable, *workers)


def _spawn_ps(party: str, run: dict, w: int, control: str, cfg: PubSubVFLConfig, tmp: Path,
              pinned: list[int]) -> subprocess.Popen:
    ch = cfg.channels
    return _spawn({"role": "ps", "party": party, "run": run, "workers": w, "control": control,
                   "cores": pinned, "blas_threads": 1,
                   "host": ch.party_host(party), "port": getattr(ch, f"{party}_port"),
                   "data": str(tmp / f"{party}.npz"), "init_path": str(tmp / f"{party}_init.pkl")}, tmp, f"ps_{party}")


def _spawn_workers(party: str, run: dict, w: int, ports: dict, hosts: dict, tmp: Path,
                   pinned: list[int]) -> list[subprocess.Popen]:
    """A party's workers: its own PS and broker, and the other party's broker, by address; each
    pinned to the party's cores, its BLAS threads its share of them."""
    other = "passive" if party == "active" else "active"
    addr = {p: f"tcp://{hosts[p]}:" for p in hosts}
    return [_spawn({"role": "worker", "party": party, "index": i, "run": run,
                    "cores": pinned, "blas_threads": len(pinned) // w,
                    "ps": addr[party] + str(ports[party]["ps"]),
                    "consume": addr[party] + str(ports[party]["consume"]),
                    "publish": addr[other] + str(ports[other]["publish"]),
                    "data": str(tmp / f"{party}.npz")}, tmp, f"{party}_{i}") for i in range(w)]


def run_variant(cfg: PubSubVFLConfig, data: VFLData, variant: str, seed: int, workers: tuple[int, int] | None = None,
                batch_size: int | None = None, dp_mu: float = 0.0, kill_passive_after_s: float | None = None,
                timeout_s: float = 600.0, remote_passive: bool = False) -> RunResult:
    """One training run of `variant` over real processes and sockets. `remote_passive`: start the
    active party only and take the passive one from its launcher (`join`, launch.py), which
    connects to channels.control_port at the active party's address, maybe from another machine."""
    align(data.active_train, data.passive_train, "train split")
    align(data.active_test, data.passive_test, "test split")
    workers = workers or _default_workers(cfg, variant)
    B = batch_size or cfg.batch_size
    ch = cfg.channels
    hosts = {party: ch.party_host(party) for party in ("active", "passive")}
    local = ("active",) if remote_passive else ("active", "passive")
    if remote_passive and ch.control_port == 0:
        raise ValueError("channels.control_port: 0, but a party on another machine needs the coordinator's port")
    if remote_passive and kill_passive_after_s is not None:
        raise ValueError("kill_passive_after_s: the passive workers run on the other party's machine")
    run = _settings(cfg, data.task, variant, seed, B, dp_mu)
    init = _initial(cfg, data, seed)
    pinned = party_cores(cfg, workers, alone=remote_passive)
    procs: list[subprocess.Popen] = []
    ctx = zmq.Context()
    with tempfile.TemporaryDirectory(prefix="pubsub_vfl_") as tmpdir:
        tmp = Path(tmpdir)
        for party in local:
            _write_party(tmp, party, data, init[party])
        control = ctx.socket(zmq.ROUTER)
        control.setsockopt(zmq.LINGER, 0)
        control_host = hosts["active"] if remote_passive else "127.0.0.1"
        control_addr = f"tcp://{control_host}:{bind(control, control_host, ch.control_port)}"
        try:
            idents: dict[str, bytes] = {}
            ports: dict[str, dict] = {}
            joined = None
            w_of = dict(zip(("active", "passive"), workers))
            for party in local:
                procs.append(_spawn_ps(party, run, w_of[party], control_addr, cfg, tmp, pinned[party]))
            servers = list(procs)
            deadline = time.time() + timeout_s

            def receive(block: bool = True):
                """(identity, message) from a party; None after one short poll when not blocking."""
                while not control.poll(50):
                    for p in servers:
                        if p.poll() is not None and p.returncode != 0:
                            raise PartyFailure(f"{variant}: a parameter server exited with code {p.returncode}")
                    if time.time() > deadline:
                        raise TimeoutError(f"{variant}: no answer from the parties within {timeout_s} s")
                    if not block:
                        return None
                ident, raw = control.recv_multipart()
                return ident, pickle.loads(raw)

            while len(ports) < 2 or (remote_passive and joined is None):
                ident, msg = receive()
                if msg[0] == "join":  # the passive party's launcher: its ids must be ours, in our order
                    try:
                        for where, ids, mine in (("train split", msg[2], data.active_train),
                                                 ("test split", msg[3], data.active_test)):
                            align(mine, PartyData(np.asarray(ids), np.empty((len(ids), 0))), f"{where} (remote party)")
                    except VFLDataError as err:
                        control.send_multipart([ident, pickle.dumps(("refused", str(err)))])
                        time.sleep(0.2)
                        raise
                    joined = ident
                else:
                    idents[msg[1]], ports[msg[1]] = ident, msg[2]
            if joined is not None:
                control.send_multipart([joined, pickle.dumps(("ports", ports, hosts))])
            worker_procs = {}
            for party in local:
                for i, p in enumerate(_spawn_workers(party, run, w_of[party], ports, hosts, tmp, pinned[party])):
                    worker_procs[(party, i)] = p
                    procs.append(p)
            ready: set[str] = set()
            while len(ready) < 2:
                ready.add(receive()[1][1])
            time.sleep(0.3)  # let the subscriptions reach the publishers (zmq's slow joiner)
            for ident in idents.values():
                control.send_multipart([ident, pickle.dumps(("go",))])
            go = time.time()
            results: dict[str, dict] = {}
            killed = False
            while len(results) < 2:
                if kill_passive_after_s is not None and not killed and time.time() - go > kill_passive_after_s:
                    os.kill(worker_procs[("passive", 0)].pid, signal.SIGKILL)  # the fault check
                    killed = True
                got = receive(block=False)
                if got is not None and got[1][0] == "result":
                    results[got[1][1]] = got[1][2]
            result = _evaluate(cfg, data, variant, seed, workers, B, dp_mu, results)
            if joined is not None:  # the passive launcher may stop: the run is over
                control.send_multipart([joined, pickle.dumps(("finished", result.metric))])
                time.sleep(0.2)
        finally:
            _stop(procs)
            ctx.destroy(linger=0)
    return result


def join(cfg: PubSubVFLConfig, data: VFLData, variant: str, seed: int, workers: tuple[int, int] | None = None,
         batch_size: int | None = None, dp_mu: float = 0.0, timeout_s: float = 600.0) -> float:
    """The passive party on a machine of its own: its parameter server and workers, against the
    active party's coordinator at channels.active_host:control_port (run_variant with
    remote_passive). Sends its ids (the alignment check), learns the active party's addresses,
    trains, and returns the test metric the active party measured."""
    ch = cfg.channels
    if ch.control_port == 0:
        raise ValueError("channels.control_port: 0; set the port the active party's coordinator listens on")
    workers = workers or _default_workers(cfg, variant)
    run = _settings(cfg, data.task, variant, seed, batch_size or cfg.batch_size, dp_mu)
    control_addr = f"tcp://{ch.party_host('active')}:{ch.control_port}"
    pinned = party_cores(cfg, workers, alone=True)["passive"]
    procs: list[subprocess.Popen] = []
    ctx = zmq.Context()
    with tempfile.TemporaryDirectory(prefix="pubsub_vfl_passive_") as tmpdir:
        tmp = Path(tmpdir)
        _write_party(tmp, "passive", data, _initial(cfg, data, seed)["passive"])
        coordinator = ctx.socket(zmq.DEALER)
        coordinator.setsockopt(zmq.LINGER, 0)
        coordinator.connect(control_addr)  # zmq connects whenever the active party binds: any start order
        try:
            procs.append(_spawn_ps("passive", run, workers[1], control_addr, cfg, tmp, pinned))
            coordinator.send_pyobj(("join", "passive", data.passive_train.ids.tolist(), data.passive_test.ids.tolist()))
            deadline = time.time() + timeout_s
            while True:
                while not coordinator.poll(100):
                    if procs[0].poll() is not None:
                        raise PartyFailure(f"{variant}: the passive parameter server exited with code {procs[0].returncode}")
                    if time.time() > deadline:
                        raise TimeoutError(f"{variant}: no answer from the active party at {control_addr} within {timeout_s} s")
                msg = coordinator.recv_pyobj()
                if msg[0] == "ports":
                    procs += _spawn_workers("passive", run, workers[1], msg[1], msg[2], tmp, pinned)
                elif msg[0] == "finished":
                    return float(msg[1])
                elif msg[0] == "refused":
                    raise VFLDataError(f"the active party at {control_addr} refused this party: {msg[1]}")
        finally:
            _stop(procs)
            ctx.destroy(linger=0)


def _evaluate(cfg, data: VFLData, variant, seed, workers, B, dp_mu, results) -> RunResult:
    act, pas = results["active"], results["passive"]
    go = min(act["go_at"], pas["go_at"])

    def score(pa, pp):
        out = model.predict(pa["bottom"], pp, pa["top"], data.active_test.x, data.passive_test.x)
        return model.metric(data.task, data.y_test, out)

    curve = []
    for e in sorted(set(act["snapshots"]) & set(pas["snapshots"])):
        (ta, pa), (tp, pp) = act["snapshots"][e], pas["snapshots"][e]
        curve.append({"seconds": max(ta, tp) - go, "metric": score(pa, pp)})
    better = (lambda m: m >= cfg.target_metric) if data.task == "classification" else (lambda m: m <= cfg.target_metric)
    reached = [point["seconds"] for point in curve if better(point["metric"])]
    stats = {party: results[party]["workers"] for party in ("active", "passive")}
    every = [s for party in stats.values() for s in party.values()]
    wall = max((s["wall_s"] for s in every), default=0.0)
    return RunResult(
        variant=variant, seed=seed, workers_active=workers[0], workers_passive=workers[1], batch_size=B, dp_mu=dp_mu,
        metric=score(act["params"], pas["params"]), curve=curve, wall_s=wall,
        time_to_target_s=reached[0] if reached else None,
        idle_fraction={party: float(np.mean([s["wait_s"] / s["wall_s"] for s in st.values()])) if st else float("nan")
                       for party, st in stats.items()},
        cpu_utilisation=sum(s["cpu_s"] for s in every) / max(sum(s["wall_s"] for s in every), 1e-9),
        busy_fraction=sum(s["busy_s"] for s in every) / max(sum(s["wall_s"] for s in every), 1e-9),
        dropped=sum(s["dropped"] for s in stats["active"].values()) + act["barrier_dropped"] + pas["barrier_dropped"]
        + act["lost"] + pas["lost"],
        reassigned=act["reassigned"], overflow=act["overflow"] + pas["overflow"], retrained=sum(s["retrained"] for s in stats["active"].values()),
        dead_workers={party: results[party]["dead_workers"] for party in ("active", "passive")},
        worker_stats={party: {str(k): v for k, v in st.items()} for party, st in stats.items()},
        params={"active": act["params"], "passive": pas["params"]})
