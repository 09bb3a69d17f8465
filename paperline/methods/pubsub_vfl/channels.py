"""Publish/subscribe channels keyed by batch id over zmq, with bounded FIFO buffers and a deadline.

A party's parameter server hosts the channel it receives on, as a broker thread (the paper's
design and the spec's queue per batch id): the other party's workers publish to its SUB socket,
and it keeps one FIFO buffer per (kind, batch id) holding that batch id's entries of successive
epochs, at most `capacity` of them (the spec's p for embeddings, q for gradients): a producer more
than `capacity` epochs ahead of the consumer pushes out the oldest entry (counted as `overflow`),
so staleness is bounded. Its own workers take entries from it over DEALER/ROUTER, each entry by
one worker only: a zmq SUB socket would give every worker of the party a copy of every entry. A
worker asks for the (epoch, batch) it is about to train; a batch id of another epoch holds other
rows (the batches are drawn anew each epoch), so only the entry of that epoch is handed out, and
one the buffer pushed out is never trained (its batch meets the deadline and is put back).
Entries older than the deadline are forgotten. A published message is [topic, sent at, payload]: the
topic `<kind><epoch>:<batch>|`, the send time a packed float (the deadline's clock), the payload the
publisher's pickle, which the broker keeps and hands on as the bytes it arrived as (it never reads
a payload: the worker that takes it unpickles it, once). An answer is [topic, payload], or [b""]
for none."""
from __future__ import annotations

import pickle
import struct
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import zmq

EMBEDDING, GRADIENT, DROP = b"E", b"G", b"D"
SENT_AT = struct.Struct("<d")  # a publish's time.time(), its own frame: the broker reads no payload


def key_of(epoch: int, batch: int) -> str:
    return f"{epoch}:{batch}"


def parse_key(key: str) -> tuple[int, int]:
    """(epoch, batch) of a `key_of` key."""
    epoch, batch = key.split(":")
    return int(epoch), int(batch)


def topic(kind: bytes, key: str) -> bytes:
    return kind + key.encode() + b"|"


def bind(sock: zmq.Socket, host: str, port: int) -> int:
    """Bind on host:port, or on a free port when port is 0; returns the port."""
    if port == 0:
        return sock.bind_to_random_port(f"tcp://{host}")
    sock.bind(f"tcp://{host}:{port}")
    return port


class Buffers:
    """One bounded FIFO per (kind, batch id) of (epoch, sent at, payload) entries; a FIFO that
    empties is deleted (a run opens one per batch id and kind: the live ones are the few in flight)."""

    def __init__(self, capacity: int, deadline_s: float):
        self.capacity, self.deadline_s = capacity, deadline_s
        self.fifo: dict[tuple[bytes, int], deque] = {}
        self.overflow = 0  # entries pushed out of a full buffer before any worker took them
        self.stored = self.taken = 0

    def put(self, kind: bytes, epoch: int, batch: int, sent_at: float, payload: object) -> None:
        buf = self.fifo.setdefault((kind, batch), deque())
        if len(buf) >= self.capacity:
            buf.popleft()
            self.overflow += 1
        buf.append((epoch, sent_at, payload))
        self.stored += 1

    def take(self, wanted: Sequence[tuple[bytes, str]], any_of: Sequence[bytes]):
        """(kind, key, payload) of the first wanted (kind, "epoch:batch") entry there is, else, of a
        kind in any_of, the oldest entry of the FIFO opened first; removed from its FIFO. None when
        there is none."""
        return self.take_parsed([(kind, *parse_key(key)) for kind, key in wanted], any_of)

    def take_parsed(self, wanted: Sequence[tuple[bytes, int, int]], any_of: Sequence[bytes]):
        """`take`, the wanted keys given as (kind, epoch, batch)."""
        for kind, epoch, batch in wanted:
            buf = self.fifo.get((kind, batch))
            if buf is None:
                continue
            for entry in buf:
                if entry[0] == epoch:
                    buf.remove(entry)
                    return self._took(kind, batch, buf, entry)
        if any_of:
            for (kind, batch), buf in self.fifo.items():
                if kind in any_of:
                    return self._took(kind, batch, buf, buf.popleft())
        return None

    def _took(self, kind: bytes, batch: int, buf: deque, entry: tuple):
        if not buf:
            del self.fifo[(kind, batch)]
        self.taken += 1
        return kind, key_of(entry[0], batch), entry[2]

    def expire(self, now: float) -> None:
        late = [slot for slot, buf in self.fifo.items() if now - buf[0][1] > self.deadline_s]
        for slot in late:
            buf = self.fifo[slot]
            while buf and now - buf[0][1] > self.deadline_s:
                buf.popleft()
            if not buf:
                del self.fifo[slot]


@dataclass
class Request:
    """A worker's request waiting at the broker, its keys parsed once."""

    ident: bytes
    until: float
    wanted: list[tuple[bytes, int, int]]  # (kind, epoch, batch)
    any_of: list[bytes]
    checked: bool = False  # against the entries there were when it came; since then only new ones can answer it

    def may_take(self, arrived: set[tuple[bytes, int]]) -> bool:
        """Whether an entry it wants may be there: at its first check, or when one of its (kind,
        batch id) or a kind in any_of has just arrived (a taken or expired entry answers nobody)."""
        return (not self.checked or any((kind, batch) in arrived for kind, _, batch in self.wanted)
                or any(kind in self.any_of for kind, _ in arrived))


class Broker:
    """A party's channel: SUB (the other party's workers publish to it) → Buffers → ROUTER (its
    own workers take from it). A worker's request waits here until an entry it wants arrives or
    its timeout passes (then the answer is None)."""

    def __init__(self, ctx: zmq.Context, host: str, capacity: int, deadline_s: float):
        self.inbox, self.outbox = ctx.socket(zmq.SUB), ctx.socket(zmq.ROUTER)
        for sock in (self.inbox, self.outbox):
            sock.setsockopt(zmq.LINGER, 0)
        self.inbox.setsockopt(zmq.SUBSCRIBE, b"")
        self.ports = {"publish": bind(self.inbox, host, 0), "consume": bind(self.outbox, host, 0)}
        self.buffers = Buffers(capacity, deadline_s)
        self.waiting: list[Request] = []  # in the order they came: the first asked is the first served
        threading.Thread(target=self._serve, daemon=True).start()

    def _answer(self, now: float, arrived: set[tuple[bytes, int]]) -> None:
        """Answer the requests an entry that arrived (`arrived`: its (kind, batch id)) may serve,
        new ones, and those whose timeout has passed; the rest wait on."""
        still = []
        for request in self.waiting:
            got = self.buffers.take_parsed(request.wanted, request.any_of) if request.may_take(arrived) else None
            request.checked = True
            if got is not None or now >= request.until:
                answer = [b""] if got is None else [topic(got[0], got[1]), got[2]]
                self.outbox.send_multipart([request.ident, *answer])
            else:
                still.append(request)
        self.waiting = still

    def _serve(self) -> None:
        poller = zmq.Poller()
        poller.register(self.inbox, zmq.POLLIN)
        poller.register(self.outbox, zmq.POLLIN)
        try:
            while True:
                events = dict(poller.poll(10))
                now = time.time()
                arrived: set[tuple[bytes, int]] = set()
                while self.inbox in events:
                    try:
                        raw_topic, raw_sent_at, payload = self.inbox.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    epoch, batch = parse_key(raw_topic[1:-1].decode())
                    (sent_at,) = SENT_AT.unpack(raw_sent_at)
                    self.buffers.put(raw_topic[:1], epoch, batch, sent_at, payload)
                    arrived.add((raw_topic[:1], batch))
                while self.outbox in events:
                    try:
                        ident, raw = self.outbox.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    timeout_s, wanted, any_of = pickle.loads(raw)
                    parsed = [(kind, *parse_key(key)) for kind, key in wanted]
                    self.waiting.append(Request(ident, now + timeout_s, parsed, any_of))
                self.buffers.expire(now)
                self._answer(now, arrived)
        except (zmq.ContextTerminated, zmq.ZMQError):  # the context closed under the broker
            pass


class Publisher:
    def __init__(self, ctx: zmq.Context, address: str):
        self.sock = ctx.socket(zmq.PUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(address)

    def publish(self, kind: bytes, key: str, payload) -> None:
        self.sock.send_multipart([topic(kind, key), SENT_AT.pack(time.time()), pickle.dumps(payload, protocol=5)])


class Consumer:
    """A worker's end of its party's broker: one request at a time."""

    def __init__(self, ctx: zmq.Context, address: str):
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(address)

    def wait_any(self, wanted: list[tuple[bytes, str]], timeout_s: float, any_of: Sequence[bytes] = ()):
        """(kind, key, payload) of the first wanted (kind, key) entry, or of any entry of a kind in
        any_of, that the broker has within timeout_s; None when none came."""
        self.sock.send(pickle.dumps((max(0.0, timeout_s), list(wanted), list(any_of)), protocol=5))
        self.sock.poll()  # the broker always answers, at the latest when the timeout passes
        answer = self.sock.recv_multipart()
        if len(answer) == 1:  # [b""]: nothing came within the timeout
            return None
        raw_topic, payload = answer
        return raw_topic[:1], raw_topic[1:-1].decode(), pickle.loads(payload)
