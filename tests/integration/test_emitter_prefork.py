"""A Meter made before fork() delivers from the children to the real broker:
os.fork() itself, and the pre-fork server model (the Meter made once, at
import, then N worker processes forked, each emitting K events). Every
event arrives exactly once: none lost in a child, none the parent had
queued sent again by one."""

from __future__ import annotations

import json
import multiprocessing
import os
import time
import uuid
from collections import Counter

import pytest

from kafka_events import records_in, unwrap
from phasemeter.producers import Meter

pytestmark = pytest.mark.integration

WORKERS, PER_WORKER = 3, 40
_METER: Meter | None = None  # the pre-fork server's Meter, made before the workers fork


def emit(meter: Meter, rid: str) -> None:
    meter.record(model="m", input_tokens=10, output_tokens=5, t0=time.time(), ttft_s=0.1, e2e_s=0.5,
                 request_id=rid)


def wait_delivered(bootstrap: str, topic: str, n: int) -> Counter:
    """request_id -> times it is on the topic, once n events are there (or
    what is there at the deadline). A message may be an envelope of many."""
    deadline = time.monotonic() + 60
    while True:
        got = Counter(e["request_id"] for r in records_in(bootstrap, topic, at_least=1, timeout_s=60)
                      for e in unwrap(r.value))
        if sum(got.values()) >= n or time.monotonic() > deadline:
            return got
        time.sleep(0.5)


def test_events_emitted_in_an_os_fork_child_are_delivered_once(kafka_bootstrap):
    topic = f"fork-{uuid.uuid4().hex[:10]}"
    meter = Meter(kafka_bootstrap, topic, flush_timeout_s=30)
    try:
        emit(meter, "parent-warm-up")
        assert meter.flush(30)  # the parent's sender thread and producer are up
        for i in range(20):  # some may still be queued at the fork: the parent's to send
            emit(meter, f"parent-{i}")
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.close(read)
                for i in range(30):
                    emit(meter, f"child-{i}")
                flushed = meter.flush(30)
                with os.fdopen(write, "w") as out:
                    out.write(json.dumps({"flushed": flushed, "stats": meter.stats().as_dict()}))
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        with os.fdopen(read) as inp:
            child = json.loads(inp.read() or "{}")
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert child["flushed"] is True, child
        assert child["stats"] == {"enqueued": 30, "sent": 30, "dropped": 0, "failed": 0, "queued": 0, "refused": 0}
        emit(meter, "parent-after")  # the parent's producer still works after the child is gone
        assert meter.flush(30)
        st = meter.stats()
        assert (st.enqueued, st.sent, st.failed) == (22, 22, 0)
    finally:
        meter.close(5)
    got = wait_delivered(kafka_bootstrap, topic, 1 + 20 + 30 + 1)
    expected = {"parent-warm-up", "parent-after"} | {f"parent-{i}" for i in range(20)} \
        | {f"child-{i}" for i in range(30)}
    assert len(got) == len(expected)
    assert set(got) == expected
    assert max(got.values()) == 1  # none twice


def _worker(index: int) -> None:
    """One forked server worker: K events through the Meter it inherited."""
    meter = _METER
    for i in range(PER_WORKER):
        emit(meter, f"w{index}-{i}")
    flushed = meter.flush(30)
    st = meter.stats()
    # multiprocessing's children leave through os._exit (no atexit): the exit
    # code says whether everything was sent, counted from this process's zero.
    raise SystemExit(0 if flushed and (st.enqueued, st.sent, st.queued) == (PER_WORKER, PER_WORKER, 0) else 3)


def test_a_pre_fork_server_delivers_every_worker_event_exactly_once(kafka_bootstrap):
    global _METER
    topic = f"prefork-{uuid.uuid4().hex[:10]}"
    _METER = meter = Meter(kafka_bootstrap, topic, flush_timeout_s=30)  # "at import", in the master
    try:
        emit(meter, "master-start")  # the master's own event before it forks: its sender is running
        for i in range(10):
            emit(meter, f"master-{i}")
        ctx = multiprocessing.get_context("fork")
        procs = [ctx.Process(target=_worker, args=(n,)) for n in range(WORKERS)]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(90)
        assert len(procs) == WORKERS
        assert [proc.exitcode for proc in procs] == [0] * WORKERS
        assert meter.flush(30)
        st = meter.stats()
        assert (st.enqueued, st.sent, st.failed) == (11, 11, 0)
    finally:
        _METER = None
        meter.close(5)
    got = wait_delivered(kafka_bootstrap, topic, WORKERS * PER_WORKER + 11)
    workers = {rid for rid in got if rid.startswith("w")}
    assert len(workers) == WORKERS * PER_WORKER
    assert workers == {f"w{n}-{i}" for n in range(WORKERS) for i in range(PER_WORKER)}
    assert set(got) - workers == {"master-start"} | {f"master-{i}" for i in range(10)}
    assert sum(got.values()) == len(got)  # none twice


MASTER = """
import json, os, sys, time
from phasemeter.producers import Meter

bootstrap, topic, workers, per = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
meter = Meter(bootstrap, topic, flush_timeout_s=30)  # at import, as a pre-fork server's app module


def emit(rid):
    meter.record(model="m", input_tokens=10, output_tokens=5, t0=time.time(), ttft_s=0.1, e2e_s=0.5, request_id=rid)


emit("master-start")
assert meter.flush(30)
for i in range(200):  # still queued or in flight when the workers fork: the master's alone
    emit(f"master-{i}")
pids = []
for n in range(workers):
    pid = os.fork()
    if pid == 0:  # a worker: emits, then leaves as a server worker does (atexit closes the Meter)
        for i in range(per):
            emit(f"w{n}-{i}")
        sys.exit(0)
    pids.append(pid)
codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
emit("master-end")  # the master's producer still sends after its workers are gone
assert meter.flush(30), meter.stats()
print(json.dumps({"codes": codes, "stats": meter.stats().as_dict()}))
"""


def test_forked_workers_that_exit_normally_deliver_through_atexit(kafka_bootstrap, tmp_path):
    """The whole pre-fork model in its own process: the Meter made at import,
    workers forked from a master whose sender is busy, each leaving through
    sys.exit, so atexit (not an explicit flush) delivers its events."""
    import subprocess
    import sys

    topic = f"prefork-exit-{uuid.uuid4().hex[:10]}"
    script = tmp_path / "master.py"
    script.write_text(MASTER)
    done = subprocess.run([sys.executable, str(script), kafka_bootstrap, topic, str(WORKERS), str(PER_WORKER)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    master = json.loads(done.stdout.strip().splitlines()[-1])
    assert master["codes"] == [0] * WORKERS
    assert (master["stats"]["enqueued"], master["stats"]["sent"]) == (202, 202)
    got = wait_delivered(kafka_bootstrap, topic, WORKERS * PER_WORKER + 202)
    expected = {"master-start", "master-end"} | {f"master-{i}" for i in range(200)} \
        | {f"w{n}-{i}" for n in range(WORKERS) for i in range(PER_WORKER)}
    assert len(got) == len(expected)
    assert set(got) == expected
    assert sum(got.values()) == len(got)  # none twice


HELD_AT_FORK = """
import faulthandler, json, os, sys, threading, time
from phasemeter.producers import Meter

bootstrap, topic = sys.argv[1], sys.argv[2]
meter = Meter(bootstrap, topic, flush_timeout_s=30)


def emit(rid):
    meter.record(model="m", input_tokens=10, output_tokens=5, t0=time.time(), ttft_s=0.1, e2e_s=0.5, request_id=rid)


emit("parent-0")
assert meter.flush(30)
# The parent's sender thread inside KafkaProducer.send() at the moment of the
# fork, made certain: a thread holds the producer's batch-list lock across it.
# (kafka-python's own attributes: the lock send() takes to list a new batch.)
lock = meter._sender._producer._accumulator._incomplete._lock
taken, release = threading.Event(), threading.Event()
threading.Thread(target=lambda: (lock.acquire(), taken.set(), release.wait(), lock.release()), daemon=True).start()
assert taken.wait(10)
pid = os.fork()
if pid == 0:  # the child: its own events, then a normal exit (atexit)
    faulthandler.dump_traceback_later(60, exit=True)  # a hang prints every thread's stack, exits 1
    for i in range(5):
        emit(f"child-{i}")
    sys.exit(0)
release.set()
code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
emit("parent-1")
assert meter.flush(30), meter.stats()
print(json.dumps({"child": code}))
"""


def test_a_child_forked_while_the_parent_sender_holds_a_producer_lock_exits(kafka_bootstrap, tmp_path):
    """A fork can land while the parent's sender thread is inside
    KafkaProducer.send(), holding one of the producer's locks. The child's
    copy of that lock stays held forever, so nothing in the child may take it:
    not even kafka-python's own atexit close of the parent's producer, which
    a normal exit runs. The child must exit, and its events arrive."""
    import subprocess
    import sys

    topic = f"prefork-held-{uuid.uuid4().hex[:10]}"
    script = tmp_path / "held.py"
    script.write_text(HELD_AT_FORK)
    done = subprocess.run([sys.executable, str(script), kafka_bootstrap, topic],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-6000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"child": 0}, done.stderr[-6000:]
    got = wait_delivered(kafka_bootstrap, topic, 7)
    assert set(got) == {"parent-0", "parent-1"} | {f"child-{i}" for i in range(5)}
    assert sum(got.values()) == len(got)  # none twice
