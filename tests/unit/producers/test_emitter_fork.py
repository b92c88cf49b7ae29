"""A Meter made before fork() works in the child (pre-fork servers: gunicorn,
uvicorn --workers): its own sender thread, lock and queue, counters from
zero, and nothing the parent had queued. A real os.fork(); a fake producer
(this is a unit test: the real broker's version is in tests/integration)."""

from __future__ import annotations

import gc
import json
import os
import threading
import weakref

from phasemeter.producers import Meter

GOOD = {"model": "m", "input_tokens": 3, "output_tokens": 2, "t0": 1_800_000_000.0, "ttft_s": 0.1, "e2e_s": 0.5}


class Recorder:
    """A producer that keeps what it was sent; acks at once."""

    def __init__(self):
        self.values = []

    def send(self, topic, key=None, value=None, partition=None):
        self.values.append(value)
        return self

    def add_callback(self, f):
        f("metadata")
        return self

    def add_errback(self, f):
        return self

    def flush(self, timeout=None):
        pass

    def close(self, timeout=None):
        pass


def in_child(body) -> dict:
    """Run body() in a forked child; its JSON-able result, or the child's error."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: always leaves through os._exit, never back into pytest
        code = 1
        try:
            os.close(read)
            with os.fdopen(write, "w") as out:
                try:
                    out.write(json.dumps({"ok": body()}))
                except BaseException as exc:  # the parent reports it
                    out.write(json.dumps({"error": repr(exc)}))
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as inp:
        text = inp.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, text
    result = json.loads(text)
    assert "error" not in result, result["error"]
    return result["ok"]


def test_a_child_sends_its_own_events_and_none_the_parent_had_queued():
    parent, gate = os.getpid(), threading.Event()
    sent = Recorder()

    def factory(**kwargs):
        if os.getpid() == parent:
            gate.wait(30)  # the parent's events stay queued across the fork
        return sent

    meter = Meter("127.0.0.1:1", "t", producer_factory=factory, envelope_size=1, flush_timeout_s=5)
    try:
        for i in range(5):
            meter.record(**GOOD, request_id=f"parent-{i}")
        assert meter.stats().queued == 5  # the parent's thread is up, stuck in the factory

        def child():
            before = meter.stats().as_dict()
            for i in range(2):
                meter.record(**GOOD, request_id=f"child-{i}")
            flushed = meter.flush(10)
            return {"before": before, "after": meter.stats().as_dict(), "flushed": flushed,
                    "ids": [json.loads(v)["request_id"] for v in sent.values]}

        got = in_child(child)
        assert got["before"] == {"enqueued": 0, "sent": 0, "dropped": 0, "failed": 0, "queued": 0, "refused": 0}
        assert got["flushed"] is True
        assert got["after"] == {"enqueued": 2, "sent": 2, "dropped": 0, "failed": 0, "queued": 0, "refused": 0}
        assert got["ids"] == ["child-0", "child-1"]

        gate.set()  # the parent still sends its own, once
        assert meter.flush(10)
        assert len(sent.values) == 5
        assert [json.loads(v)["request_id"] for v in sent.values] == [f"parent-{i}" for i in range(5)]
        st = meter.stats()
        assert (st.enqueued, st.sent, st.queued) == (5, 5, 0)
    finally:
        gate.set()
        meter.close(1)


def test_a_child_of_a_parent_whose_sender_ran_starts_its_own_thread():
    sent = Recorder()
    meter = Meter("127.0.0.1:1", "t", producer_factory=lambda **kw: sent, envelope_size=1, flush_timeout_s=5)
    try:
        meter.record(**GOOD, request_id="warm-up")
        assert meter.flush(10)  # the parent's sender thread and producer exist

        def child():
            meter.record(**GOOD, request_id="child")
            flushed = meter.flush(10)
            names = sorted(t.name for t in threading.enumerate())
            return {"flushed": flushed, "threads": names, "ids": [json.loads(v)["request_id"] for v in sent.values]}

        got = in_child(child)
        assert got["flushed"] is True
        assert got["threads"].count("phasemeter-emitter") == 1
        assert got["ids"] == ["warm-up", "child"]  # the parent's one was sent before the fork; one more here
    finally:
        meter.close(1)


def test_a_closed_meter_stays_closed_in_the_child():
    meter = Meter("127.0.0.1:1", "t", producer_factory=lambda **kw: Recorder(), flush_timeout_s=1)
    meter.close(1)

    def child():
        meter.record(**GOOD)
        return meter.stats().as_dict()

    got = in_child(child)
    assert (got["enqueued"], got["dropped"]) == (0, 1)


def test_the_fork_hook_does_not_keep_a_meter_alive():
    meter = Meter("127.0.0.1:1", "t", producer_factory=lambda **kw: Recorder(), flush_timeout_s=1)
    ref = weakref.ref(meter)
    del meter
    gc.collect()
    assert ref() is None


def test_the_kafka_python_names_a_childs_disarm_relies_on():
    """sender._disarm makes a forked child's copy of the parent's KafkaProducer
    inert through two of kafka-python's own names: `_unregister_cleanup` (drops
    the atexit close) and `_closed` (close() and __del__ return at once). This
    fails, naming what moved, when the pinned kafka-python changes them."""
    import atexit

    import kafka
    from kafka import KafkaProducer

    from phasemeter.producers import sender

    pinned = next(line.split("==")[1].strip() for line in open(os.path.join(os.path.dirname(__file__), "..", "..", "..",
                                                                             "constraints.txt"))
                  if line.startswith("kafka-python=="))
    assert kafka.__version__ == pinned
    # A producer's shell: its name (close() logs it), no client, no sender, no sockets.
    copy = KafkaProducer.__new__(KafkaProducer)
    copy.config = {"client_id": "shell"}
    ran = []
    copy._cleanup = hook = lambda: ran.append("atexit close")
    atexit.register(hook)
    sender._disarm(copy)
    assert copy._cleanup is None and copy._closed is True
    copy.close()  # returns before touching anything a real producer has (the shell has none)
    copy.close(timeout=1, null_logger=True)  # as its __del__ does
    assert ran == []
