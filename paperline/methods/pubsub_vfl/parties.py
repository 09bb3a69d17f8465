"""The party processes: a parameter server (PS) per party and its workers, each an OS process
started as `python -m paperline.methods.pubsub_vfl.parties <spec.json>`, so a party can run on a
machine of its own given the addresses. They talk only over zmq: workers ↔ their PS by
DEALER/ROUTER, workers ↔ the other party's workers by PUB/SUB through the channels' brokers, the
PS ↔ the coordinator (train.py) by DEALER/ROUTER. Imports numpy and zmq only (fast start-up)."""
from __future__ import annotations

import json
import math
import os
import pickle
import sys
import time
from collections import deque

import numpy as np
import zmq

from paperline.methods.pubsub_vfl import cores, model
from paperline.methods.pubsub_vfl.channels import (
    DROP,
    EMBEDDING,
    GRADIENT,
    Broker,
    Consumer,
    Publisher,
    bind,
    key_of,
    parse_key,
)

# per variant: how each party's workers meet its PS ("barrier": sync all-reduce every step;
# "step": push the gradient, pull the parameters every step; "interval": local steps, averaged on
# the PS every ΔT_t epochs), whether batches are paired worker i ↔ batches i mod w (else any free
# worker takes the next batch), and how many batches a passive worker keeps in flight
MODES = {
    "vfl": {"active": "barrier", "passive": "barrier", "paired": True, "inflight": 1},
    "vfl_ps": {"active": "barrier", "passive": "barrier", "paired": True, "inflight": 1},
    "avfl": {"active": "step", "passive": "step", "paired": True, "inflight": None},
    "avfl_ps": {"active": "step", "passive": "step", "paired": True, "inflight": None},
    "pubsub_vfl": {"active": "interval", "passive": "step", "paired": False, "inflight": None},
}


def batches(n: int, batch_size: int, epoch: int, seed: int) -> list[np.ndarray]:
    """The rows of each batch id of an epoch: the same at both parties (a shared seed)."""
    order = np.random.default_rng([seed, epoch]).permutation(n)
    return [order[i:i + batch_size] for i in range(0, n, batch_size)]


def delta_t(delta_t0: int, acc: float, target: float) -> int:
    """ΔT_t = ΔT₀·(1 + tanh(acc_t/acc_target)) epochs. [I] The paper's formula was not decoded
    (spec b, g); this is the spec's stand-in."""
    return max(1, int(round(delta_t0 * (1 + math.tanh(acc / target)))))


def _exit_with_parent(ppid: int) -> None:
    """A daemon thread that ends this process at once when the coordinator that started it (pid
    `ppid`, from the spec: it may have died while this one was still starting) is gone; SIGKILL
    gives it no chance to stop us. No orphan, whatever the process is blocked on. os._exit: a zmq
    context whose broker thread still holds its sockets would block a normal exit."""
    import threading

    def watch() -> None:
        while os.getppid() == ppid:
            time.sleep(0.2)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


# ---------------------------------------------------------------- parameter server


class BatchQueues:
    """The (epoch, batch id) pairs a party's PS hands out, in order: one queue per worker where
    batches are paired (worker i takes the batch ids i mod w), else one that any free worker takes
    from. A batch dropped at its deadline goes back once (the paper reassigns it to a free worker),
    to the end of the queue of the worker that reports it (it asks next); once, so a batch that
    cannot be trained does not circle for ever."""

    def __init__(self, plan: list[tuple[int, int]], w: int, paired: bool):
        self.by_worker = {i: deque(eb for eb in plan if eb[1] % w == i) for i in range(w)} if paired else None
        self.shared = deque() if paired else deque(plan)
        self.requeued: set[tuple[int, int]] = set()

    def _queue(self, wid: int) -> deque[tuple[int, int]]:
        return self.shared if self.by_worker is None else self.by_worker[wid]

    def next(self, wid: int) -> tuple[int, int, bool] | None:
        """(epoch, batch, whether it is a reassigned one) for worker wid, None when all are out."""
        queue = self._queue(wid)
        if not queue:
            return None
        eb = queue.popleft()
        return (*eb, eb in self.requeued)

    def requeue(self, wid: int, eb: tuple[int, int]) -> bool:
        """Put a dropped batch back; False when it had been put back once already."""
        if eb in self.requeued:
            return False
        self.requeued.add(eb)
        self._queue(wid).append(eb)
        return True

    def orphan(self, dead: int, alive: set[int]) -> None:
        """A dead worker's queue goes to the live workers, in turn (the spec's reassignment)."""
        if self.by_worker is None or not alive:
            return
        orphaned, self.by_worker[dead] = self.by_worker[dead], deque()
        for n, eb in enumerate(orphaned):
            self.by_worker[sorted(alive)[n % len(alive)]].append(eb)
        self.by_worker = {i: deque(sorted(q)) for i, q in self.by_worker.items()}

    def empty(self) -> bool:
        return not self.shared if self.by_worker is None else all(not q for q in self.by_worker.values())


def run_ps(spec: dict) -> None:
    party, run = spec["party"], spec["run"]
    mode, w = MODES[run["variant"]][party], spec["workers"]
    ctx = zmq.Context()
    control = ctx.socket(zmq.DEALER)
    control.setsockopt(zmq.LINGER, 2000)
    control.connect(spec["control"])
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    ports = {"ps": bind(router, spec["host"], spec["port"])}
    # the channel this party receives on: embeddings (p) at the active party, gradients (q) here
    capacity = run["buffer_embeddings" if party == "active" else "buffer_gradients"]
    broker = Broker(ctx, spec["host"], capacity, run["deadline_s"])
    ports.update(broker.ports)
    control.send_pyobj(("hello", party, ports))

    data = np.load(spec["data"])
    n, B, epochs = len(data["x"]), run["batch_size"], run["epochs"]
    n_batches = math.ceil(n / B)
    paired = bool(MODES[run["variant"]]["paired"])
    queues = BatchQueues([(e, b) for e in range(epochs) for b in range(n_batches)], w, paired)
    params = spec["init"]
    latest: dict[int, dict] = {}
    # The model after each epoch, defined by the updates, not by which worker is first there (a
    # killed and resumed run, or a busier moment, must draw the same curve). Where the PS applies
    # the updates (step, barrier): the initial parameters plus every update of a batch of epoch <= e
    # and none later; SGD's steps add up, so this is the PS's parameters had the later epochs'
    # updates waited. Where workers step locally (interval): the mean of every worker's parameters
    # at its end of epoch e.
    moved: dict[int, tuple[float, dict]] = {}  # epoch -> (time of its last update, sum of its steps)
    worker_snaps: dict[int, dict[int, tuple[float, dict]]] = {}  # epoch -> worker -> (time, params)
    stats: dict[int, dict] = {}
    ready = set()
    # barrier rounds are counted within an epoch: round (e, k) is every worker's k-th batch of
    # epoch e, so workers with fewer batches in an epoch never hold up the next one
    steps_done: dict[tuple[int, int], int] = {}
    pending_round: dict[tuple[int, int], list] = {}  # (e, k) -> [(identity, wid, grads)]
    round_started: dict[tuple[int, int], float] = {}
    per_epoch = {i: sum(1 for b in range(n_batches) if b % w == i) for i in range(w)}
    go_at, last_msg = None, time.time()
    deadline = run["deadline_s"]
    barrier_dropped = 0

    alive, seen = set(range(w)), {i: time.time() for i in range(w)}
    handed, pushed = {i: 0 for i in range(w)}, {i: 0 for i in range(w)}

    def expected(r: tuple[int, int]) -> int:  # live workers that take part in barrier round r
        return sum(1 for i in alive if per_epoch[i] > r[1]) if paired else len(alive)

    def bury(dead: int) -> None:
        """A worker silent for 2·T_ddl is dead: its batches go to the live workers (the spec's
        reassignment to a free worker), and barrier rounds stop counting it."""
        alive.discard(dead)
        queues.orphan(dead, alive)

    def apply(grads: dict, epoch: int, lr: float) -> None:
        nonlocal params
        params = model.sgd(params, grads, lr)
        sum_of_steps = moved[epoch][1] if epoch in moved else model.zeros_like(params)
        moved[epoch] = (time.time(), model.sgd(sum_of_steps, grads, lr))

    def close_round(r: tuple[int, int]) -> None:
        entries = pending_round.pop(r)
        round_started.pop(r, None)
        # the linear scaling rule: a step on the mean gradient of k workers' batches takes k times
        # the lr, as k one-batch steps would (unscaled, VFL-PS with w workers learned w times slower)
        apply(model.average([g for _, _, g in entries]), r[0], run["lr"] * len(entries))
        for ident, _, _ in entries:
            router.send_multipart([ident, _dump(("params", params))])

    held: list = []

    def hand_out(ident: bytes, wid: int) -> None:
        got = queues.next(wid)
        handed[wid] += got is not None
        router.send_multipart([ident, _dump(("batch", *got) if got else ("done",))])

    poller = zmq.Poller()
    poller.register(router, zmq.POLLIN)
    poller.register(control, zmq.POLLIN)
    while True:
        events = dict(poller.poll(50))
        now = time.time()
        if control in events:
            msg = control.recv_pyobj()
            if msg[0] == "go":
                go_at = now
                for ident, wid in held:
                    hand_out(ident, wid)
                held.clear()
            elif msg[0] == "stop":
                break
        if router in events:
            ident, raw = router.recv_multipart()
            msg = _load(raw)
            kind, wid = msg[0], msg[1]
            last_msg = seen[wid] = now
            if kind == "ready":
                ready.add(wid)
                router.send_multipart([ident, _dump(("params", params))])
                if len(ready) == w:
                    control.send_pyobj(("ready", party))
            elif kind == "next" and go_at is None:  # nothing before the coordinator's go
                held.append((ident, wid))
            elif kind == "next":
                hand_out(ident, wid)
            elif kind == "grad" and mode == "step":
                pushed[wid] += 1
                apply(msg[2], msg[3], run["lr"])
                router.send_multipart([ident, _dump(("params", params))])
            elif kind == "grad":  # barrier
                pushed[wid] += 1
                k = steps_done.get((wid, msg[3]), 0)
                steps_done[(wid, msg[3])] = k + 1
                r = (msg[3], k)
                pending_round.setdefault(r, []).append((ident, wid, msg[2]))
                round_started.setdefault(r, now)
                if len(pending_round[r]) >= expected(r):
                    close_round(r)
            elif kind == "sync":  # interval: average the latest parameters of every worker
                latest[wid] = msg[2]
                params = model.average(list(latest.values()))
                router.send_multipart([ident, _dump(("params", params))])
            elif kind == "snap" and mode == "interval":
                worker_snaps.setdefault(msg[2], {})[wid] = (msg[3], msg[4])
            elif kind == "requeue":  # the requeuing worker asks again: it takes it, or any free one
                queues.requeue(wid, (msg[2], msg[3]))
            elif kind == "bye":
                stats[wid] = msg[2]
        for i in [i for i in alive if go_at and i not in stats and now - seen[i] > 2 * deadline]:
            bury(i)
        for r in [r for r, t in round_started.items() if now - t > deadline]:  # a dead worker's round
            barrier_dropped += expected(r) - len(pending_round[r])
            close_round(r)
        if go_at and queues.empty() and (len(stats) == w or now - last_msg > 2 * deadline):
            break
    if mode == "interval" and latest:
        params = model.average(list(latest.values()))
    snapshots: dict[int, tuple[float, dict]] = {}
    for e, by_worker in sorted(worker_snaps.items()):  # interval
        kept = [by_worker[i] for i in sorted(by_worker)]  # the worker order fixes the float sums
        snapshots[e] = (max(t for t, _ in kept), model.average([p for _, p in kept]))
    snapshot = spec["init"]
    for e, (t, sum_of_steps) in sorted(moved.items()):  # step, barrier
        snapshot = model.add(snapshot, sum_of_steps)
        snapshots[e] = (t, snapshot)
    control.send_pyobj(("result", party, {
        "params": params, "snapshots": snapshots, "workers": stats, "go_at": go_at,
        "dead_workers": sorted(set(range(w)) - set(stats)), "barrier_dropped": barrier_dropped,
        "reassigned": len(queues.requeued), "overflow": broker.buffers.overflow,
        # batches a dead worker took and never gave a gradient back for (lost with it)
        "lost": sum(handed[i] - pushed[i] for i in set(range(w)) - set(stats)) if mode != "interval" else 0}))
    time.sleep(0.1)
    ctx.destroy(linger=2000)


# ---------------------------------------------------------------- workers


def _dump(obj) -> bytes:
    return pickle.dumps(obj, protocol=5)


def _load(raw: bytes):
    return pickle.loads(raw)


class _Worker:
    def __init__(self, spec: dict):
        self.spec, self.run = spec, spec["run"]
        self.wid, self.party = spec["index"], spec["party"]
        self.mode = MODES[self.run["variant"]][self.party]
        self.ctx = zmq.Context()
        self.ps = self.ctx.socket(zmq.DEALER)
        self.ps.setsockopt(zmq.LINGER, 1000)
        self.ps.connect(spec["ps"])
        self.channel = Consumer(self.ctx, spec["consume"])
        self.pub = Publisher(self.ctx, spec["publish"])
        data = np.load(spec["data"])
        self.x, self.y = data["x"], (data["y"] if "y" in data else None)
        self.rng = np.random.default_rng([self.run["seed"], self.wid, 0 if self.party == "active" else 1])
        self.slowdown = self.run[f"{self.party}_slowdown"]
        self.wait_s = self.busy_s = 0.0
        self.steps = self.dropped = self.retrained = 0
        self.again = False  # the batch in hand is a reassigned one
        self.epoch = -1
        self.params = self._request(("ready", self.wid))[1]
        self.t0: float | None = None  # from the first batch on (the go)
        self.cpu0: float | None = None

    def _request(self, msg, waiting: bool = False):
        t = time.time()
        self.ps.send(_dump(msg))
        self.ps.poll()
        reply = _load(self.ps.recv())
        if waiting:
            self.wait_s += time.time() - t
        return reply

    def compute(self, fn, rows: int):
        t = time.time()
        out = fn()
        if self.run["delay_per_sample_ms"]:  # heterogeneity emulation (spec e), off by default
            time.sleep(self.run["delay_per_sample_ms"] * 1e-3 * rows * self.slowdown)
        self.busy_s += time.time() - t
        return out

    def next_batch(self):
        msg = self._request(("next", self.wid), waiting=self.t0 is not None)
        if self.t0 is None:
            self.t0, self.cpu0 = time.time(), time.process_time()
        if msg[0] == "done":
            return None
        e, b, self.again = msg[1], msg[2], msg[3]
        if e != self.epoch:
            self.new_epoch(e)
        self.epoch = e
        return e, b, batches(len(self.x), self.run["batch_size"], e, self.run["data_seed"])[b]

    def new_epoch(self, e: int) -> None:
        if self.epoch >= 0 and self.mode == "interval":  # elsewhere the PS snapshots by its count
            self.ps.send(_dump(("snap", self.wid, self.epoch, time.time(), self.params)))

    def finish(self) -> None:
        self.new_epoch(self.epoch + 1)
        if self.t0 is None or self.cpu0 is None:
            self.t0, self.cpu0 = time.time(), time.process_time()
        wall = time.time() - self.t0
        self.ps.send(_dump(("bye", self.wid, {
            "wall_s": wall, "wait_s": self.wait_s, "busy_s": self.busy_s,
            "cpu_s": time.process_time() - self.cpu0, "steps": self.steps, "dropped": self.dropped,
            "retrained": self.retrained, "syncs": getattr(self, "syncs", 0),
            "cores": cores.available()})))
        time.sleep(0.05)
        self.ctx.destroy(linger=1000)

    def update(self, grads, epoch: int) -> None:
        """Apply the gradient of a batch of `epoch` (a passive worker's batch in flight may be of
        the epoch before the one it is handing out now)."""
        if self.mode == "interval":
            self.params = model.sgd(self.params, grads, self.run["lr"])
        else:  # step / barrier: the PS applies it and answers with its parameters
            self.params = self._request(("grad", self.wid, grads, epoch), waiting=True)[1]
        self.steps += 1
        self.retrained += self.again


class ActiveWorker(_Worker):
    def __init__(self, spec):
        super().__init__(spec)
        self.acc = 0.0
        self.syncs = 0  # ΔT aggregations with the PS before the last one

    def new_epoch(self, e: int) -> None:
        super().new_epoch(e)
        if self.mode == "interval" and e > 0 and e % delta_t(self.run["delta_t0"], self.acc,
                                                             self.run["target_accuracy"]) == 0:
            self.params = self._request(("sync", self.wid, self.params), waiting=True)[1]
            self.syncs += 1

    def loop(self) -> None:
        task, labels = self.run["task"], self.y
        assert labels is not None, "the active party holds the labels"
        while (item := self.next_batch()) is not None:
            e, b, rows = item
            key = key_of(e, b)
            t = time.time()
            got = self.channel.wait_any([(EMBEDDING, key)], self.run["deadline_s"])
            self.wait_s += time.time() - t
            if got is None:  # the deadline: drop the batch, tell the other party, put it back once
                self.dropped += 1
                self.pub.publish(DROP, key, None)
                self.ps.send(_dump(("requeue", self.wid, e, b)))
                continue
            z_p, y = got[2], labels[rows]

            def step():
                bottom, top = self.params["bottom"], self.params["top"]
                z_a, cache = model.bottom_forward(bottom, self.x[rows])
                loss, g_top, g_za, g_zp = model.top_loss_and_grads(top, z_a, z_p, y, task)
                return {"bottom": model.bottom_backward(bottom, cache, g_za), "top": g_top}, g_zp, z_a, z_p

            grads, g_zp, z_a, _ = self.compute(step, len(rows))
            self.pub.publish(GRADIENT, key, g_zp)
            self.acc = 0.9 * self.acc + 0.1 * self._batch_accuracy(z_a, z_p, y)
            self.update(grads, e)
        if self.mode == "interval":
            self.params = self._request(("sync", self.wid, self.params), waiting=True)[1]
        self.finish()

    def _batch_accuracy(self, z_a, z_p, y) -> float:
        top = self.params["top"]
        out = (np.maximum(np.concatenate([z_a, z_p], 1) @ top["U1"] + top["c1"], 0) @ top["U2"] + top["c2"])[:, 0]
        if self.run["task"] == "classification":
            return float(np.mean((out > 0) == (y > 0.5)))
        return float(max(0.0, 1 - np.mean((out - y) ** 2) / max(np.var(y), 1e-12)))


class PassiveWorker(_Worker):
    def loop(self) -> None:
        inflight = self.run["inflight"]
        pending: dict[str, tuple[float, tuple]] = {}
        done = False
        while not done or pending:
            if not done and len(pending) < inflight:
                item = self.next_batch()
                if item is None:
                    done = True
                    continue
                e, b, rows = item
                mu = self.run["dp_mu"]
                z, cache = self.compute(lambda: model.bottom_forward(self.params, self.x[rows]), len(rows))
                self.pub.publish(EMBEDDING, key_of(e, b), model.privatise(z, mu, self.run["dp_clip"], self.rng))
                pending[key_of(e, b)] = (time.time(), (cache, len(rows), e))
                continue
            t = time.time()
            oldest = min(ts for ts, _ in pending.values())
            got = self.channel.wait_any([(GRADIENT, key) for key in pending],
                                        max(0.0, oldest + self.run["deadline_s"] - t), any_of=[DROP])
            self.wait_s += time.time() - t
            # a drop the active party announces, of a batch held here or not (one worker hears
            # each): it goes back to this party's queue too, and this worker asks for work again
            dropped = []
            if got is not None and got[0] == DROP:
                e, b = parse_key(got[1])
                self.ps.send(_dump(("requeue", self.wid, e, b)))
                dropped.append(got[1])
                done = False
            elif got is not None:
                _, key, g_z = got
                _, (cache, n_rows, epoch) = pending.pop(key)
                self.update(self.compute(lambda: model.bottom_backward(self.params, cache, g_z), n_rows), epoch)
            for k in dropped + [k for k, (ts, _) in pending.items() if time.time() - ts > self.run["deadline_s"]]:
                if pending.pop(k, None) is not None:
                    self.dropped += 1
        self.finish()


def main(argv: list[str]) -> int:
    spec = json.loads(open(argv[0]).read())
    spec["init"] = _load(open(spec["init_path"], "rb").read()) if spec.get("init_path") else None
    _exit_with_parent(spec["parent"])
    cores.pin(spec["cores"])  # the party's share of the cores (C_a or C_p); BLAS threads: the env
    try:
        if spec["role"] == "ps":
            run_ps(spec)
        elif spec["party"] == "active":
            ActiveWorker(spec).loop()
        else:
            PassiveWorker(spec).loop()
    except KeyboardInterrupt:
        os._exit(1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
