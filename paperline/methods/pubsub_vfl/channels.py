"""Publish/subscribe channels keyed by batch id over zmq, with bounded FIFO buffers and a deadline.

A party's parameter server hosts the channel it receives on: an XSUB socket the other party's
workers publish to and an XPUB socket its own workers subscribe to, joined by `zmq.proxy` (the
broker is zmq's own). A message is [topic, payload]; the topic is `<kind><epoch>:<batch>|`, so a
subscriber could filter by batch id; ours subscribe to the kind and keep, per batch id, at most
`capacity` entries (the oldest dropped when full: the spec's p and q) and forget entries older
than the deadline."""
from __future__ import annotations

import pickle
import threading
import time
from collections import deque

import zmq

EMBEDDING, GRADIENT, DROP = b"E", b"G", b"D"


def key_of(epoch: int, batch: int) -> str:
    return f"{epoch}:{batch}"


def topic(kind: bytes, key: str) -> bytes:
    return kind + key.encode() + b"|"


def bind(sock: zmq.Socket, host: str, port: int) -> int:
    """Bind on host:port, or on a free port when port is 0; returns the port."""
    if port == 0:
        return sock.bind_to_random_port(f"tcp://{host}")
    sock.bind(f"tcp://{host}:{port}")
    return port


def start_broker(ctx: zmq.Context, host: str) -> tuple[int, int]:
    """XSUB (publishers connect) → XPUB (subscribers connect) in a daemon thread; their ports."""
    xsub, xpub = ctx.socket(zmq.XSUB), ctx.socket(zmq.XPUB)
    ports = bind(xsub, host, 0), bind(xpub, host, 0)
    threading.Thread(target=_proxy, args=(xsub, xpub), daemon=True).start()
    return ports


def _proxy(xsub: zmq.Socket, xpub: zmq.Socket) -> None:
    try:
        zmq.proxy(xsub, xpub)
    except (zmq.ContextTerminated, zmq.ZMQError):  # the context closed under the proxy
        pass


class Publisher:
    def __init__(self, ctx: zmq.Context, address: str):
        self.sock = ctx.socket(zmq.PUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(address)

    def publish(self, kind: bytes, key: str, payload) -> None:
        self.sock.send_multipart([topic(kind, key), pickle.dumps((time.time(), payload), protocol=5)])


class Subscriber:
    """Subscribes to the given kinds; buffers per batch key, bounded and FIFO, with a deadline."""

    def __init__(self, ctx: zmq.Context, address: str, kinds: list[bytes], capacity: int, deadline_s: float):
        self.sock = ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        for kind in kinds:
            self.sock.setsockopt(zmq.SUBSCRIBE, kind)
        self.sock.connect(address)
        self.capacity, self.deadline_s = capacity, deadline_s
        self.buffers: dict[tuple[bytes, str], deque] = {}
        self.overflow = 0  # entries the FIFO buffers dropped

    def _store(self, raw_topic: bytes, raw: bytes) -> None:
        kind, key = raw_topic[:1], raw_topic[1:-1].decode()
        buf = self.buffers.setdefault((kind, key), deque())
        if len(buf) >= self.capacity:
            buf.popleft()
            self.overflow += 1
        buf.append(pickle.loads(raw))

    def _expire(self) -> None:
        now = time.time()
        for k in [k for k, buf in self.buffers.items() if buf and now - buf[-1][0] > self.deadline_s]:
            del self.buffers[k]

    def drain(self, timeout_s: float) -> None:
        """Receive whatever arrives within timeout_s (at least one poll)."""
        if self.sock.poll(max(0, int(timeout_s * 1000))):
            while True:
                try:
                    self._store(*self.sock.recv_multipart(zmq.NOBLOCK))
                except zmq.Again:
                    break
        self._expire()

    def take(self, kind: bytes, key: str):
        """The newest entry of a channel, removing the channel; None when it is empty."""
        buf = self.buffers.pop((kind, key), None)
        return buf[-1][1] if buf else None

    def wait_any(self, kind: bytes, keys, timeout_s: float):
        """(key, payload) for the first of keys that has an entry within timeout_s, or None."""
        end = time.time() + timeout_s
        while True:
            for key in keys:
                if (kind, key) in self.buffers:
                    return key, self.take(kind, key)
            left = end - time.time()
            if left <= 0:
                return None
            self.drain(min(left, 0.05))
