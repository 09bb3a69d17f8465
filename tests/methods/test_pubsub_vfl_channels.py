"""The channels keyed by batch id: a buffer per batch id holds at most p entries (of successive
epochs), the oldest pushed out and counted; a worker gets only the entries it asks for, each
entry one worker; in a run, a passive party p epochs ahead of a slow active one overflows it."""
from __future__ import annotations

import pickle
import time

import zmq

from paperline.methods.pubsub_vfl.channels import (
    DROP,
    EMBEDDING,
    GRADIENT,
    Broker,
    Buffers,
    Consumer,
    Publisher,
    key_of,
    parse_key,
)
from paperline.methods.pubsub_vfl.config import PubSubVFLConfig
from paperline.methods.pubsub_vfl.data import load


def test_a_buffer_keeps_the_last_p_epochs_of_a_batch_id_and_counts_the_rest():
    buffers = Buffers(capacity=2, deadline_s=60.0)
    now = time.time()
    for epoch in range(5):  # a producer 4 epochs ahead of a consumer still at epoch 0
        buffers.put(EMBEDDING, epoch, 0, now, f"z{epoch}")
    buffers.put(EMBEDDING, 0, 1, now, "other batch")
    assert buffers.overflow == 3
    # no entry more than p epochs older than the newest is ever handed out
    assert [buffers.take([(EMBEDDING, f"{e}:0")], []) for e in range(3)] == [None] * 3
    assert buffers.take([(EMBEDDING, "4:0")], []) == (EMBEDDING, "4:0", "z4")
    assert buffers.take([(EMBEDDING, "3:0")], []) == (EMBEDDING, "3:0", "z3")
    assert buffers.take([(EMBEDDING, "3:0")], []) is None  # taken once
    assert buffers.take([(GRADIENT, "0:1")], []) is None  # another kind's channel
    buffers.expire(now + 61)
    assert buffers.take([(EMBEDDING, "0:1")], []) is None  # past the deadline


def test_a_buffer_that_empties_is_deleted_and_any_of_takes_the_first_opened():
    buffers = Buffers(capacity=2, deadline_s=60.0)
    now = time.time()
    buffers.put(EMBEDDING, 0, 0, now, "z0")
    buffers.put(DROP, 0, 3, now, None)
    buffers.put(DROP, 0, 1, now + 1, None)
    buffers.put(EMBEDDING, 0, 2, now + 30, "z2")
    assert buffers.take([(EMBEDDING, "0:0")], []) == (EMBEDDING, "0:0", "z0")
    assert buffers.take([], [DROP]) == (DROP, "0:3", None)
    assert set(buffers.fifo) == {(DROP, 1), (EMBEDDING, 2)}
    buffers.expire(now + 62)  # the drop is past the deadline, the embedding not
    assert set(buffers.fifo) == {(EMBEDDING, 2)} and parse_key(key_of(12, 7)) == (12, 7)


def test_each_entry_goes_to_the_one_worker_that_asks_for_its_batch():
    ctx = zmq.Context()
    try:
        broker = Broker(ctx, "127.0.0.1", capacity=5, deadline_s=10.0)
        pub = Publisher(ctx, f"tcp://127.0.0.1:{broker.ports['publish']}")
        first, second = (Consumer(ctx, f"tcp://127.0.0.1:{broker.ports['consume']}") for _ in range(2))
        time.sleep(0.3)  # the subscription reaches the publisher
        for batch in range(2):
            pub.publish(EMBEDDING, f"0:{batch}", f"z{batch}")
        assert first.wait_any([(EMBEDDING, "0:0")], 5.0) == (EMBEDDING, "0:0", "z0")
        assert second.wait_any([(EMBEDDING, "0:1")], 5.0) == (EMBEDDING, "0:1", "z1")
        # nothing a worker did not ask for, and nothing another worker took
        assert first.wait_any([(EMBEDDING, "0:1"), (EMBEDDING, "1:0")], 0.2) is None
        pub.publish(EMBEDDING, "1:0", "z1,0")
        assert second.wait_any([(EMBEDDING, "1:0")], 5.0) == (EMBEDDING, "1:0", "z1,0")
        assert broker.buffers.overflow == 0 and broker.buffers.taken == 3
    finally:
        ctx.destroy(linger=0)


UNPICKLED: list[str] = []


def _unpickled(name: str) -> Counted:
    UNPICKLED.append(name)
    return Counted(name)


class Counted:
    """A payload that records each time it is unpickled."""

    def __init__(self, name: str):
        self.name = name

    def __reduce__(self):
        return _unpickled, (self.name,)


def test_the_broker_hands_on_the_bytes_published_and_only_the_worker_unpickles_them():
    ctx = zmq.Context()
    try:
        broker = Broker(ctx, "127.0.0.1", capacity=5, deadline_s=10.0)
        pub = Publisher(ctx, f"tcp://127.0.0.1:{broker.ports['publish']}")
        worker = Consumer(ctx, f"tcp://127.0.0.1:{broker.ports['consume']}")
        time.sleep(0.3)  # the subscription reaches the publisher
        UNPICKLED.clear()
        pub.publish(GRADIENT, "2:3", Counted("g"))
        kind, key, got = worker.wait_any([(GRADIENT, "2:3")], 5.0)
        assert (kind, key, got.name) == (GRADIENT, "2:3", "g")
        assert UNPICKLED == ["g"]  # once, by the worker: the broker neither read nor re-pickled it
        # what the broker keeps is the publisher's pickle, byte for byte
        pub.publish(EMBEDDING, "0:0", Counted("z"))
        deadline = time.time() + 5.0
        while not broker.buffers.stored == 2 and time.time() < deadline:
            time.sleep(0.01)
        (stored,) = broker.buffers.fifo[(EMBEDDING, 0)]
        assert stored[2] == pickle.dumps(Counted("z"), protocol=5) and UNPICKLED == ["g"]
    finally:
        ctx.destroy(linger=0)


def test_a_slow_active_party_overflows_its_buffer_and_drops_what_was_pushed_out():
    """One batch an epoch, p = 2: the passive party publishes every epoch's embedding at once
    (q = 5 in flight) while the active one takes 0.4 s a step, so an entry is pushed out; its batch
    meets the deadline and goes back, never trained from another epoch's entry."""
    from paperline.methods.pubsub_vfl.train import run_variant

    cfg = PubSubVFLConfig(data={"name": "breast_cancer"}, epochs=4, batch_size=1000, lr=0.1,
                          channels={"deadline_s": 1.0, "buffer_embeddings": 2}, delay_per_sample_ms=0.05,
                          active_slowdown=20.0, passive_slowdown=1.0)
    result = run_variant(cfg, load(cfg.data), "pubsub_vfl", 0, workers=(1, 1), timeout_s=60)
    (active,) = result.worker_stats["active"].values()
    assert result.overflow > 0
    assert active["dropped"] >= 1 and result.reassigned >= 1
