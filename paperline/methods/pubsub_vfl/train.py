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

from paperline.methods.pubsub_vfl import model
from paperline.methods.pubsub_vfl.channels import bind
from paperline.methods.pubsub_vfl.config import PubSubVFLConfig
from paperline.methods.pubsub_vfl.data import VFLData, align
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
    curve: list[tuple[float, float]]  # (seconds since go, test metric) per epoch
    wall_s: float
    time_to_target_s: float | None
    idle_fraction: dict[str, float]  # per party: waiting / wall, mean over its workers
    cpu_utilisation: float  # process CPU seconds of all workers over their wall seconds
    busy_fraction: float  # compute (incl. the emulated part) over wall, all workers
    dropped: int  # batches dropped at the deadline
    dead_workers: dict[str, list[int]] = field(default_factory=dict)
    worker_stats: dict[str, dict] = field(default_factory=dict)
    params: dict | None = None  # the final model: {"active": {...}, "passive": {...}}


class PartyFailure(RuntimeError):
    pass


def _spawn(spec: dict, tmp: Path, name: str) -> subprocess.Popen:
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(spec | {"parent": os.getpid()}))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(Path(__file__).parents[3]),
                                                                    os.environ.get("PYTHONPATH")])))
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


def run_variant(cfg: PubSubVFLConfig, data: VFLData, variant: str, seed: int, workers: tuple[int, int] | None = None,
                batch_size: int | None = None, dp_mu: float = 0.0, kill_passive_after_s: float | None = None,
                timeout_s: float = 600.0) -> RunResult:
    """One training run of `variant` over real processes and sockets."""
    align(data.active_train, data.passive_train, "train split")
    align(data.active_test, data.passive_test, "test split")
    modes = MODES[variant]
    if workers is None:
        workers = (1, 1) if variant in ("vfl", "avfl") else (cfg.workers_active, cfg.workers_passive)
    B = batch_size or cfg.batch_size
    ch = cfg.channels
    run = {"variant": variant, "seed": seed, "data_seed": seed, "batch_size": B, "epochs": cfg.epochs, "lr": cfg.lr,
           "task": data.task, "deadline_s": ch.deadline_s, "buffer_embeddings": ch.buffer_embeddings,
           "buffer_gradients": ch.buffer_gradients, "inflight": modes["inflight"] or ch.buffer_gradients,
           "delta_t0": cfg.delta_t0, "target_accuracy": cfg.target_metric if data.task == "classification" else 0.5,
           "delay_per_sample_ms": cfg.delay_per_sample_ms, "active_slowdown": cfg.active_slowdown,
           "passive_slowdown": cfg.passive_slowdown, "dp_mu": dp_mu, "dp_clip": cfg.dp_clip}
    rng = np.random.default_rng(seed)
    init_a = {"bottom": model.init_bottom(rng, data.active_train.x.shape[1], cfg.hidden, cfg.embedding),
              "top": model.init_top(rng, cfg.embedding, cfg.top_hidden)}
    init_p = model.init_bottom(rng, data.passive_train.x.shape[1], cfg.hidden, cfg.embedding)
    procs: list[subprocess.Popen] = []
    ctx = zmq.Context()
    with tempfile.TemporaryDirectory(prefix="pubsub_vfl_") as tmpdir:
        tmp = Path(tmpdir)
        np.savez(tmp / "active.npz", x=data.active_train.x, y=data.y_train)
        np.savez(tmp / "passive.npz", x=data.passive_train.x)
        for party, init in (("active", init_a), ("passive", init_p)):
            (tmp / f"{party}_init.pkl").write_bytes(pickle.dumps(init))
        control = ctx.socket(zmq.ROUTER)
        control.setsockopt(zmq.LINGER, 0)
        control_addr = f"tcp://127.0.0.1:{bind(control, '127.0.0.1', 0)}"
        try:
            idents, ports = {}, {}
            for party, w in zip(("active", "passive"), workers):
                procs.append(_spawn({"role": "ps", "party": party, "run": run, "workers": w, "control": control_addr,
                                     "host": ch.host, "port": getattr(ch, f"{party}_port"),
                                     "data": str(tmp / f"{party}.npz"),
                                     "init_path": str(tmp / f"{party}_init.pkl")}, tmp, f"ps_{party}"))
            deadline = time.time() + timeout_s

            def receive(block: bool = True):
                """(identity, message) from a party; None after one short poll when not blocking."""
                while not control.poll(50):
                    for p in procs[:2]:
                        if p.poll() is not None and p.returncode != 0:
                            raise PartyFailure(f"{variant}: a parameter server exited with code {p.returncode}")
                    if time.time() > deadline:
                        raise TimeoutError(f"{variant}: no answer from the parties within {timeout_s} s")
                    if not block:
                        return None
                ident, raw = control.recv_multipart()
                return ident, pickle.loads(raw)

            while len(ports) < 2:
                ident, (kind, party, p) = receive()
                idents[party], ports[party] = ident, p
            addr = {party: f"tcp://{ch.host}:" for party in ports}
            worker_procs = {}
            for party, w in zip(("active", "passive"), workers):
                other = "passive" if party == "active" else "active"
                for i in range(w):
                    worker_procs[(party, i)] = _spawn({
                        "role": "worker", "party": party, "index": i, "run": run,
                        "ps": addr[party] + str(ports[party]["ps"]),
                        "subscribe": addr[party] + str(ports[party]["xpub"]),
                        "publish": addr[other] + str(ports[other]["xsub"]),
                        "data": str(tmp / f"{party}.npz")}, tmp, f"{party}_{i}")
                    procs.append(worker_procs[(party, i)])
            ready = set()
            while len(ready) < 2:
                ready.add(receive()[1][1])
            time.sleep(0.3)  # let the subscriptions reach the publishers (zmq's slow joiner)
            for ident in idents.values():
                control.send_multipart([ident, pickle.dumps(("go",))])
            go = time.time()
            results, killed = {}, False
            while len(results) < 2:
                if kill_passive_after_s is not None and not killed and time.time() - go > kill_passive_after_s:
                    os.kill(worker_procs[("passive", 0)].pid, signal.SIGKILL)  # the fault check
                    killed = True
                got = receive(block=False)
                if got is not None and got[1][0] == "result":
                    results[got[1][1]] = got[1][2]
        finally:
            _stop(procs)
            ctx.destroy(linger=0)
    return _evaluate(cfg, data, variant, seed, workers, B, dp_mu, results)


def _evaluate(cfg, data: VFLData, variant, seed, workers, B, dp_mu, results) -> RunResult:
    act, pas = results["active"], results["passive"]
    go = min(act["go_at"], pas["go_at"])

    def score(pa, pp):
        out = model.predict(pa["bottom"], pp, pa["top"], data.active_test.x, data.passive_test.x)
        return model.metric(data.task, data.y_test, out)

    curve = []
    for e in sorted(set(act["snapshots"]) & set(pas["snapshots"])):
        (ta, pa), (tp, pp) = act["snapshots"][e], pas["snapshots"][e]
        curve.append((max(ta, tp) - go, score(pa, pp)))
    better = (lambda m: m >= cfg.target_metric) if data.task == "classification" else (lambda m: m <= cfg.target_metric)
    reached = [t for t, m in curve if better(m)]
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
        dead_workers={party: results[party]["dead_workers"] for party in ("active", "passive")},
        worker_stats={party: {str(k): v for k, v in st.items()} for party, st in stats.items()},
        params={"active": act["params"], "passive": pas["params"]})
