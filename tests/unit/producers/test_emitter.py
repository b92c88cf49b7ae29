"""Unit tests for phasemeter.producers (no broker: a fake producer is injected)."""

from __future__ import annotations

import json
import logging
import random
import subprocess
import sys
import textwrap
import threading
import time
import types
from pathlib import Path

import pytest

from phasemeter.producers import EmitterStats, Generation, Meter
from phasemeter.producers import generation as generation_mod
from phasemeter.producers import sender as sender_mod

SCHEMA = json.loads((Path(__file__).resolve().parents[3] / "schema" / "event-v1.schema.json").read_text())


# -- fakes ---------------------------------------------------------------------
class FakeFuture:
    """Just enough of kafka-python's FutureRecordMetadata."""

    def __init__(self):
        self.callbacks, self.errbacks, self.done, self.exc = [], [], False, None

    def add_callback(self, f):
        if self.done and self.exc is None:
            f("metadata")
        elif not self.done:
            self.callbacks.append(f)
        return self

    def add_errback(self, f):
        if self.done and self.exc is not None:
            f(self.exc)
        elif not self.done:
            self.errbacks.append(f)
        return self

    def success(self):
        self.done = True
        for f in self.callbacks:
            f("metadata")

    def failure(self, exc):
        self.done, self.exc = True, exc
        for f in self.errbacks:
            f(exc)


class FakeProducer:
    """mode: "ok" acks at once, "fail" errbacks, "hold" keeps futures pending,
    "raise" raises from send(). `gate` (an Event) blocks send() until set."""

    def __init__(self, mode="ok", gate=None):
        self.mode, self.gate = mode, gate
        self.records, self.pending, self.partitions = [], [], []
        self.entered = threading.Event()
        self.flushes, self.close_calls = 0, []
        self.kwargs = None

    def factory(self, **kwargs):
        self.kwargs = kwargs
        return self

    def partitions_for(self, topic):
        return {0, 1, 2, 3}

    def send(self, topic, key=None, value=None, partition=None):
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(60)
        mode = self.mode(len(self.records)) if callable(self.mode) else self.mode
        if mode == "raise":
            raise RuntimeError("send exploded")
        self.records.append((topic, key, value))
        self.partitions.append(partition)
        fut = FakeFuture()
        if mode == "ok":
            fut.success()
        elif mode == "fail":
            fut.failure(RuntimeError("broker said no"))
        else:
            self.pending.append(fut)
        return fut

    def flush(self, timeout=None):
        self.flushes += 1

    def close(self, timeout=None):
        self.close_calls.append(timeout)

    def events(self):
        return [json.loads(v) for _, _, v in self.records]


def make_meter(fake=None, **kw):
    fake = fake or FakeProducer()
    kw.setdefault("flush_timeout_s", 2.0)
    # These tests read the one-keyed-message-per-event wire format; the
    # default (envelopes) has its own tests (test_envelope_default_*).
    kw.setdefault("envelope_size", 1)
    meter = Meter(bootstrap_servers="127.0.0.1:1", topic="t", producer_factory=fake.factory, **kw)
    return meter, fake


@pytest.fixture
def meters():
    made = []

    def _make(fake=None, **kw):
        meter, fake = make_meter(fake, **kw)
        made.append(meter)
        return meter, fake

    yield _make
    for m in made:
        m.close(timeout_s=0.5)


def check_schema(event: dict) -> None:
    """A tiny validator for the keywords event-v1.schema.json uses."""
    assert set(event) <= set(SCHEMA["properties"]), "additionalProperties is false"
    assert set(SCHEMA["required"]) <= set(event)
    py_types = {"number": (int, float), "integer": int, "string": str, "null": type(None)}
    assert len(SCHEMA["properties"]) == 15, sorted(SCHEMA["properties"])  # event-v1's fields
    for name, rule in SCHEMA["properties"].items():
        if name not in event:
            continue
        v = event[name]
        if "const" in rule:
            assert v == rule["const"], name
        if "enum" in rule:
            assert v in rule["enum"], name
        if "type" in rule:
            types_ = rule["type"] if isinstance(rule["type"], list) else [rule["type"]]
            assert any(isinstance(v, py_types[t]) and not isinstance(v, bool) for t in types_), name
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            assert rule.get("minimum", v) <= v <= rule.get("maximum", v), name
        if isinstance(v, str):
            assert rule.get("minLength", 0) <= len(v) <= rule.get("maxLength", len(v)), name


def invariant(s: EmitterStats, attempted: int) -> None:
    assert s.enqueued + s.dropped == attempted
    assert s.enqueued == s.sent + s.failed + s.queued


# -- event shape -----------------------------------------------------------------
def test_event_matches_schema_and_wire_format(meters):
    meter, fake = meters(gateway="gw-1")
    with meter.generation(model="llama", input_tokens=1200, replica="r1", cached_input_tokens=1000) as g:
        g.scheduled()
        g.first_token()
        g.finish(output_tokens=57, status="ok", finish_reason="stop")
    meter.record(model="llama", input_tokens=10, output_tokens=2, t0=1.7e9, e2e_s=0.5, request_id="rq-é")
    assert meter.flush()
    assert len(fake.records) == 2
    for topic, key, value in fake.records:
        event = json.loads(value.decode("utf-8"))
        check_schema(event)
        assert topic == "t"
        assert key == event["request_id"].encode("utf-8")
        assert value == json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        assert list(event) == list(SCHEMA["properties"])  # every field, schema order
    first, second = fake.events()
    assert first["request_id"] == g.request_id and len(g.request_id) == 32
    assert (first["gateway"], first["replica"], first["cached_input_tokens"]) == ("gw-1", "r1", 1000)
    assert (first["status"], first["finish_reason"], first["output_tokens"]) == ("ok", "stop", 57)
    assert 0 <= first["queue_s"] <= first["ttft_s"] <= first["e2e_s"]
    assert second["request_id"] == "rq-é" and second["ttft_s"] is None and second["queue_s"] is None


def test_record_without_request_id_gets_uuid4_hex(meters):
    meter, fake = meters()
    meter.record(model="m", input_tokens=1, output_tokens=1, t0=1.0, e2e_s=1.0)
    meter.record(model="m", input_tokens=1, output_tokens=1, t0=1.0, e2e_s=1.0)
    assert meter.flush()
    ids = [e["request_id"] for e in fake.events()]
    assert len(set(ids)) == 2 and all(len(i) == 32 and i[12] == "4" for i in ids)


def test_durations_are_monotonic_differences(meters, monkeypatch):
    meter, fake = meters()
    mono = iter([100.0, 100.25, 100.5, 102.0])
    wall = iter([5000.0])  # t0; wall clock is never read again
    monkeypatch.setattr(generation_mod, "time",
                        types.SimpleNamespace(monotonic=lambda: next(mono), time=lambda: next(wall)))
    with meter.generation(model="m", input_tokens=3) as g:
        g.scheduled()
        g.first_token()
        g.first_token()  # ignored: the clock iterator would run dry if it were read
        g.finish(output_tokens=4)
    assert meter.flush()
    (event,) = fake.events()
    assert (event["t0"], event["queue_s"], event["ttft_s"], event["e2e_s"]) == (5000.0, 0.25, 0.5, 2.0)


def test_wall_clock_step_does_not_change_durations(meters, monkeypatch):
    meter, fake = meters()
    wall = [1_000_000.0]
    monkeypatch.setattr(time, "time", lambda: wall[0])
    before = time.monotonic()  # the caller's own clock around the generation bounds its durations
    with meter.generation(model="m", input_tokens=3) as g:
        wall[0] -= 3600.0  # NTP steps the clock back an hour mid-generation
        g.first_token()
        g.finish(output_tokens=1)
    watched = time.monotonic() - before
    assert meter.flush()
    (event,) = fake.events()
    assert event["t0"] == 1_000_000.0
    assert 0 <= event["ttft_s"] <= event["e2e_s"] <= watched


# -- generation lifecycle ----------------------------------------------------
def test_exception_in_block_gives_error_status(meters):
    meter, fake = meters()
    with pytest.raises(KeyError):
        with meter.generation(model="m", input_tokens=3) as g:
            g.first_token()
            raise KeyError("engine died")
    assert meter.flush()
    (event,) = fake.events()
    assert (event["status"], event["output_tokens"], event["finish_reason"]) == ("error", 0, None)
    assert event["ttft_s"] is not None


def test_no_finish_gives_cancelled_and_null_ttft(meters):
    meter, fake = meters()
    with meter.generation(model="m", input_tokens=3):
        pass
    assert meter.flush()
    (event,) = fake.events()
    assert (event["status"], event["output_tokens"], event["ttft_s"]) == ("cancelled", 0, None)


def test_finish_enqueues_once_and_later_calls(meters):
    meter, fake = meters()
    with pytest.raises(ValueError):  # the block's exception is not swallowed or replaced
        with meter.generation(model="m", input_tokens=3) as g:
            assert isinstance(g, Generation)
            g.finish(output_tokens=2, status="cancelled", finish_reason="abort")
            assert meter.stats().enqueued == 1  # enqueued at finish, not at exit
            g.first_token()  # after finish: ignored
            with pytest.raises(RuntimeError, match="finish"):
                g.finish(output_tokens=3)
            raise ValueError("after finish")
    assert meter.flush()
    (event,) = fake.events()
    assert (event["status"], event["finish_reason"], event["ttft_s"]) == ("cancelled", "abort", None)


# -- record() ----------------------------------------------------------------------
def test_record_duration_and_timestamp_forms(meters):
    meter, fake = meters()
    meter.record(model="m", input_tokens=8, output_tokens=2, t0=1000.0, ttft_s=0.5, e2e_s=2.0,
                 queue_s=0.1, cached_input_tokens=4, status="error", finish_reason="length", replica="r")
    meter.record(model="m", input_tokens=8, output_tokens=2, t0=1000.0, t_first=1000.5,
                 t_end=1002.0, t_scheduled=1000.25)
    meter.record(model="m", input_tokens=8, output_tokens=0, t0=1000.0, t_end=1000.0)
    assert meter.flush()
    a, b, c = fake.events()
    assert (a["ttft_s"], a["e2e_s"], a["queue_s"], a["cached_input_tokens"]) == (0.5, 2.0, 0.1, 4)
    assert (a["status"], a["finish_reason"], a["replica"]) == ("error", "length", "r")
    assert (b["ttft_s"], b["e2e_s"], b["queue_s"]) == (0.5, 2.0, 0.25)
    assert (c["ttft_s"], c["e2e_s"], c["queue_s"]) == (None, 0.0, None)
    for e in (a, b, c):
        check_schema(e)


@pytest.mark.parametrize("kwargs, match", [
    ({"e2e_s": 1.0, "t_end": 2.0}, "not both"),
    ({"ttft_s": 0.1, "t_first": 1.1, "t_end": 2.0}, "not both"),
    ({"queue_s": 0.1, "t_end": 2.0}, "not both"),
    ({"t_first": 1.5}, "t_end"),
    ({}, "e2e_s"),
    ({"ttft_s": 0.1}, "e2e_s"),
])
def test_record_form_errors(meters, kwargs, match):
    meter, _ = meters()
    with pytest.raises(ValueError, match=match):
        meter.record(model="m", input_tokens=1, output_tokens=1, t0=1.0, **kwargs)
    assert meter.stats() == EmitterStats(0, 0, 0, 0, 0, refused=1)


GOOD = {"model": "m", "input_tokens": 10, "output_tokens": 1, "t0": 100.0, "e2e_s": 1.0}


@pytest.mark.parametrize("bad, name", [
    ({"model": None}, "model"), ({"model": ""}, "model"), ({"model": "x" * 201}, "model"),
    ({"input_tokens": -1}, "input_tokens"), ({"input_tokens": None}, "input_tokens"),
    ({"output_tokens": -5}, "output_tokens"),
    ({"cached_input_tokens": -1}, "cached_input_tokens"),
    ({"cached_input_tokens": 11}, "cached_input_tokens"),
    ({"status": "weird"}, "status"), ({"finish_reason": "x" * 65}, "finish_reason"),
    ({"request_id": ""}, "request_id"), ({"request_id": 7}, "request_id"), ({"replica": 3}, "replica"),
    ({"e2e_s": -0.1}, "e2e_s"), ({"ttft_s": -1.0}, "ttft_s"), ({"queue_s": 90_000.0}, "queue_s"),
    ({"e2e_s": None, "t_end": 99.0}, "t_end"),
    ({"e2e_s": None, "t_end": 101.0, "t_first": 99.0}, "t_first"),
])
def test_record_bad_args_name_the_argument(meters, bad, name):
    meter, _ = meters()
    with pytest.raises(ValueError, match=name):
        meter.record(**{**GOOD, **bad})


@pytest.mark.parametrize("bad, name", [
    ({"model": None}, "model"), ({"input_tokens": -1}, "input_tokens"),
    ({"cached_input_tokens": 20}, "cached_input_tokens"), ({"request_id": "r" * 129}, "request_id"),
])
def test_generation_bad_args_name_the_argument(meters, bad, name):
    meter, _ = meters()
    with pytest.raises(ValueError, match=name):
        meter.generation(**{"model": "m", "input_tokens": 10, **bad})


def test_finish_bad_args_name_the_argument(meters):
    meter, _ = meters()
    g = meter.generation(model="m", input_tokens=1)
    with pytest.raises(ValueError, match="output_tokens"):
        g.finish(output_tokens=-1)
    with pytest.raises(ValueError, match="status"):
        g.finish(output_tokens=1, status="okay")
    g.finish(output_tokens=1)  # still usable after a rejected call


# -- queueing, counting, flushing -------------------------------------------------------
def test_queue_full_drops_newest_and_never_blocks(meters):
    """"Never blocks" shown by cause, not by a stopwatch: every call returns
    while the sender is still stuck inside send() (it has not recorded event
    #1), so none of them waited on it. How fast a call is (about 1 µs to
    tens of µs) is bench/bench_emitter.py's figure, not a timed test's."""
    gate = threading.Event()
    meter, fake = meters(FakeProducer(gate=gate), queue_size=5)
    meter.record(**GOOD)
    assert fake.entered.wait(5)  # sender now stuck inside send() with event #1
    for _ in range(12):
        meter.record(**GOOD)
    assert fake.records == []  # all 12 returned while the sender was stuck in send()
    s = meter.stats()
    assert (s.enqueued, s.dropped, s.queued, s.sent) == (5, 8, 5, 0)  # the bound includes #1
    invariant(s, 13)
    gate.set()
    assert meter.flush()
    s = meter.stats()
    assert (s.sent, s.failed, s.queued, s.dropped) == (5, 0, 0, 8)
    invariant(s, 13)


def test_stalled_broker_is_bounded_by_queue_size(meters):
    # kafka-python 3 buffers without limit; in-flight events count against the bound.
    meter, fake = meters(FakeProducer(mode="hold"), queue_size=10)
    for _ in range(30):
        meter.record(**GOOD)
    assert meter.flush(timeout_s=0.2) is False
    s = meter.stats()
    assert (s.enqueued, s.dropped, s.queued) == (10, 20, 10) and len(fake.pending) == 10
    for fut in fake.pending[:4]:
        fut.failure(TimeoutError("delivery timeout"))
    for fut in fake.pending[4:]:
        fut.success()
    fake.mode = "ok"
    meter.record(**GOOD)  # room again
    assert meter.flush()
    assert meter.stats() == EmitterStats(enqueued=11, sent=7, dropped=20, failed=4, queued=0)


def test_errback_and_send_exception_count_as_failed(meters, caplog):
    meter, fake = meters(FakeProducer(mode=lambda i: "fail" if i % 2 else "ok"))
    for _ in range(10):
        meter.record(**GOOD)
    assert meter.flush()
    assert (meter.stats().sent, meter.stats().failed) == (5, 5)
    fake.mode = "raise"
    meter.record(**GOOD)
    assert meter.flush()
    s = meter.stats()
    assert (s.sent, s.failed, s.queued) == (5, 6, 0)
    invariant(s, 11)
    warnings = [r for r in caplog.records if r.name == "phasemeter.emitter"]
    assert len(warnings) <= 1  # rate limited: one per 30 s


def test_unencodable_event_is_refused_at_the_call_not_lost_in_the_sender(meters):
    meter, fake = meters()
    with pytest.raises(ValueError, match="t0"):
        meter.record(**{**GOOD, "t0": float("nan")})  # NaN is not JSON
    meter.record(**GOOD)
    assert meter.flush()
    s = meter.stats()
    assert (s.sent, s.failed, s.queued, s.refused) == (1, 0, 0, 1) and len(fake.records) == 1


def test_flush_waits_for_acks_and_times_out(meters):
    meter, fake = meters(FakeProducer(mode="hold"))
    for _ in range(3):
        meter.record(**GOOD)
    t = time.monotonic()
    # The held futures never complete: returning False at all is the timeout
    # working; it waited at least about its timeout (a lower bound).
    assert meter.flush(timeout_s=0.2) is False
    assert time.monotonic() - t >= 0.15
    assert fake.flushes >= 1  # producer.flush() was asked to push lingering batches
    s = meter.stats()
    assert (s.queued, s.sent) == (3, 0)  # in flight counts as queued
    invariant(s, 3)
    for fut in fake.pending:
        fut.success()
    assert meter.flush(timeout_s=1.0)
    assert meter.stats() == EmitterStats(enqueued=3, sent=3, dropped=0, failed=0, queued=0)


def test_invariant_under_concurrent_callers(meters):
    rng = random.Random(7)

    def mode(i):
        if rng.random() < 0.01:
            time.sleep(0.002)  # occasional slow send makes the small queue overflow
        return rng.choice(["ok", "ok", "fail", "raise"])

    meter, fake = meters(FakeProducer(mode=mode), queue_size=50)
    per_thread, n_threads, snapshots = 500, 4, []

    def work():
        for i in range(per_thread):
            if i % 2:
                meter.record(**GOOD)
            else:
                with meter.generation(model="m", input_tokens=5) as g:
                    g.first_token()
                    g.finish(output_tokens=i)
            if i % 50 == 0:
                snapshots.append(meter.stats())

    threads = [threading.Thread(target=work) for _ in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(snapshots) == n_threads * per_thread // 50  # one each 50 calls of each thread
    for s in snapshots:  # every snapshot is consistent, even mid-flight
        assert s.enqueued == s.sent + s.failed + s.queued
    assert meter.flush(timeout_s=5)
    s = meter.stats()
    invariant(s, per_thread * n_threads)
    assert s.queued == 0 and s.sent > 0 and s.failed > 0
    assert len(fake.records) <= s.sent + s.failed  # "raise" sends never reach the producer
    assert s.as_dict() == {"enqueued": s.enqueued, "sent": s.sent, "dropped": s.dropped,
                           "failed": s.failed, "queued": 0, "refused": 0}


# -- lifecycle --------------------------------------------------------------------------
def test_thread_and_producer_are_lazy():
    calls = []
    meter = Meter("127.0.0.1:1", "t", producer_factory=lambda **kw: calls.append(kw) or FakeProducer())
    meter.stats()
    assert meter.flush(timeout_s=0.1)
    meter.close()
    assert calls == [] and meter._sender._thread is None


def test_close_is_idempotent_and_drops_after(meters):
    meter, fake = meters()
    meter.record(**GOOD)
    meter.close(timeout_s=1.0)
    meter.close()
    assert len(fake.close_calls) == 1 and fake.close_calls[0] >= 0
    meter.record(**GOOD)  # no raise: dropped and counted
    with meter.generation(model="m", input_tokens=1) as g:
        g.finish(output_tokens=1)
    s = meter.stats()
    assert (s.sent, s.dropped, s.queued) == (1, 2, 0)
    invariant(s, 3)
    assert meter.flush(timeout_s=0.1)


def test_producer_config_is_merged_over_defaults(meters):
    meter, fake = meters(producer_config={"linger_ms": 50, "security_protocol": "SASL_SSL",
                                          "sasl_plain_password": "hunter2"})
    meter.record(**GOOD)
    assert meter.flush()
    kw = fake.kwargs
    assert kw["bootstrap_servers"] == "127.0.0.1:1" and kw["acks"] == "all"
    assert kw["linger_ms"] == 50 and kw["compression_type"] is None and kw["retries"] > 1_000_000
    assert kw["sasl_plain_password"] == "hunter2" and kw["security_protocol"] == "SASL_SSL"


def test_producer_construction_retried_while_callers_never_block(meters, monkeypatch, caplog):
    monkeypatch.setattr(sender_mod, "_BACKOFF_MIN_S", 0.01)
    fake, attempts, bootstrapped = FakeProducer(), [], threading.Event()

    def flaky_factory(**kw):
        attempts.append(time.monotonic())
        time.sleep(0.05)  # a slow bootstrap attempt
        if len(attempts) <= 3:
            raise ValueError(f"Unrecognized configs: {kw}")  # messages may echo secrets
        bootstrapped.wait(60)  # the attempt that succeeds waits until the callers are done
        return fake

    # The waits the sender asks for, not wall-clock gaps between attempts:
    # on a loaded machine a 50 ms sleep overshoots by more than a backoff step.
    waited = []
    real_next = sender_mod.next_backoff
    monkeypatch.setattr(sender_mod, "next_backoff", lambda b: waited.append(b) or real_next(b))
    meter = Meter("127.0.0.1:1", "t", queue_size=1000, producer_factory=flaky_factory,
                  producer_config={"sasl_plain_password": "hunter2"}, envelope_size=1)  # counts messages
    try:
        # "Never block" by cause: all 200 calls return before any producer
        # exists (the successful attempt waits on `bootstrapped`), so none
        # waited on construction. The per-call cost is bench/bench_emitter.py's.
        for _ in range(200):
            meter.record(**GOOD)
        assert fake.records == []  # nothing could be sent: no producer yet
        bootstrapped.set()
        assert meter.flush(timeout_s=30)
        assert len(attempts) == 4 and len(fake.records) == 200
        assert waited == [0.01, 0.02, 0.04]  # one wait per failed attempt, each twice the last
        invariant(meter.stats(), 200)
    finally:
        meter.close()
    ours = [r for r in caplog.records if r.name == "phasemeter.emitter"]
    assert len(ours) == 1  # three failures, one warning per 30 s
    assert "hunter2" not in caplog.text and "ValueError" in caplog.text


def test_backoff_is_capped():
    b, seen = sender_mod._BACKOFF_MIN_S, []
    for _ in range(10):
        seen.append(b)
        b = sender_mod.next_backoff(b)
    assert seen[0] == 0.1 and seen[1] == 0.2 and max(seen) == 5.0


def test_broker_never_up_close_is_bounded(meters, monkeypatch):
    monkeypatch.setattr(sender_mod, "_BACKOFF_MIN_S", 0.01)

    def down(**kw):
        raise ConnectionRefusedError("no broker")

    meter = Meter("127.0.0.1:1", "t", queue_size=10, producer_factory=down)
    for _ in range(25):
        meter.record(**GOOD)
    # Bounded: close() returns although the broker never comes up (a close
    # that waited for it would never return). The deadline turns such a
    # hang into a failure; it is no measure of how long close() takes.
    closing = threading.Thread(target=meter.close, kwargs={"timeout_s": 0.2}, daemon=True)
    closing.start()
    closing.join(60)
    assert not closing.is_alive()
    s = meter.stats()
    assert (s.enqueued, s.dropped, s.queued, s.sent) == (10, 15, 10, 0)
    invariant(s, 25)


def test_atexit_flushes_an_unclosed_meter_before_the_producer_closes_itself():
    # Like KafkaProducer, the fake registers its own atexit close when built
    # (in the sender thread, after the Meter registered its hook).
    script = textwrap.dedent("""
        import atexit
        from phasemeter.producers import Meter

        class Fut:
            def add_callback(self, f): f(None); return self
            def add_errback(self, f): return self

        class P:
            def __init__(self, **kw):
                self.n, self.closed = 0, False
                atexit.register(self.close, 1)
            def send(self, topic, key, value):
                if self.closed: raise RuntimeError("producer closed")
                self.n += 1
                return Fut()
            def flush(self, timeout=None): pass
            def close(self, timeout=None):
                if not self.closed:
                    self.closed = True
                    print("closed after", self.n, flush=True)

        m = Meter("127.0.0.1:1", "t", producer_factory=P, envelope_size=1)  # counts messages
        for _ in range(5000):
            m.record(model="m", input_tokens=1, output_tokens=1, t0=1.0, e2e_s=0.1)
        # no close(): interpreter exit must flush first, then close the producer
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "closed after 5000"


def test_importing_does_not_import_kafka():
    code = "import sys, phasemeter.producers; print('kafka' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == "False", out.stderr


def test_logger_name():
    assert sender_mod.log is logging.getLogger("phasemeter.emitter")


def test_envelopes_carry_many_generations_and_count_each(meters):
    meter, fake = meters(envelope_size=4)
    for i in range(10):
        meter.record(model="m", input_tokens=i, output_tokens=2, t0=1_800_000_000.0, ttft_s=0.1, e2e_s=0.5)
    assert meter.flush(timeout_s=5)
    envelopes = fake.events()
    assert [len(e["events"]) for e in envelopes] == [4, 4, 2] or sum(len(e["events"]) for e in envelopes) == 10
    assert all(e["kind"] == "batch" and e["schema_version"] == 1 for e in envelopes)
    assert all(key is None for _, key, _ in fake.records)
    assert sorted(ev["input_tokens"] for e in envelopes for ev in e["events"]) == list(range(10))
    st = meter.stats()
    assert (st.enqueued, st.sent, st.failed, st.queued) == (10, 10, 0, 0)


def test_envelope_default_packs_what_was_queued_with_the_same_event_bytes():
    from phasemeter.producers.emitter import DEFAULT_ENVELOPE_SIZE

    def sent(envelope_size):
        fake, ready = FakeProducer(), threading.Event()
        kw = {} if envelope_size is None else {"envelope_size": envelope_size}
        meter = Meter("127.0.0.1:1", "t", flush_timeout_s=2.0, queue_size=1000,
                      producer_factory=lambda **k: ready.wait(5) and fake, **kw)
        try:
            for i in range(150):  # all queued before the sender may take any
                meter.record(**{**GOOD, "input_tokens": i, "request_id": f"r{i}"})
            ready.set()
            assert meter.flush(timeout_s=5)
            invariant(meter.stats(), 150)
        finally:
            meter.close(timeout_s=0.5)
        return fake.records

    default, single = sent(None), sent(1)
    assert DEFAULT_ENVELOPE_SIZE == 100
    assert [len(json.loads(v)["events"]) for _, _, v in default] == [100, 50]
    assert all(key is None for _, key, _ in default)
    # Inside the envelopes, byte for byte the events one message each would carry.
    inner = b",".join(v[v.index(b"[") + 1:-2] for _, _, v in default)
    assert inner == b",".join(v for _, _, v in single)
    assert [k for _, k, _ in single] == [f"r{i}".encode() for i in range(150)]


def test_envelope_default_a_quiet_gateway_sends_each_event_without_waiting(meters):
    meter, fake = meters(envelope_size=100)
    meter.record(**GOOD)
    deadline = time.monotonic() + 5
    while not fake.records and time.monotonic() < deadline:  # no flush(): nothing holds it back
        time.sleep(0.005)
    ((_, key, value),) = fake.records
    assert key is None and [e["input_tokens"] for e in json.loads(value)["events"]] == [GOOD["input_tokens"]]


def test_envelope_delivery_failure_counts_every_generation(meters):
    meter, fake = meters(FakeProducer(mode="fail"), envelope_size=5)
    for i in range(7):
        meter.record(model="m", input_tokens=i, output_tokens=2, t0=1_800_000_000.0, ttft_s=0.1, e2e_s=0.5)
    meter.flush(timeout_s=2)
    st = meter.stats()
    assert (st.sent, st.failed, st.queued) == (0, 7, 0)


def test_envelope_size_is_validated():
    with pytest.raises(ValueError, match="envelope_size"):
        Meter(bootstrap_servers="x:1", envelope_size=0)


@pytest.mark.parametrize("exc_type", [GeneratorExit, __import__("asyncio").CancelledError])
def test_client_disconnect_is_cancelled_not_error(meters, exc_type):
    meter, fake = meters()
    with pytest.raises(exc_type):
        with meter.generation(model="m", input_tokens=5) as g:
            g.first_token()
            raise exc_type()
    assert meter.flush(timeout_s=5)
    assert fake.events()[-1]["status"] == "cancelled"
