"""Unit tests for phase events in phasemeter.producers (docs/phases.md).

No broker: the fake producer of test_emitter.py is injected. The encoded
JSON is checked against the contract table of docs/phases.md by a small
hand-written validator (`check_phase`), not against the worker's code.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
import types

import pytest
from test_emitter import SCHEMA, FakeProducer, check_schema, invariant, meters  # noqa: F401 (a fixture)

from phasemeter.producers import EmitterStats, Generation, Meter, PhaseGeneration
from phasemeter.producers import generation as generation_mod
from phasemeter.producers import phases as phases_mod
from phasemeter.producers import sender as sender_mod


# -- the contract of docs/phases.md, by hand ---------------------------------------
NUM, INT, STR, BOOL = "number", "integer", "string", "boolean"
# kind -> (required, optional, exactly one of)
CONTRACT = {
    "start": ({"model": STR, "t0": NUM, "input_tokens": INT},
              {"cached_input_tokens": INT, "queue_s": NUM, "gateway": STR, "replica": STR}, ()),
    "first_token": ({}, {"queue_s": NUM, "cached_input_tokens": INT}, ("ttft_s", "t_first")),
    "end": ({"output_tokens": INT},
            {"status": STR, "finish_reason": STR, "queue_s": NUM, "cached_input_tokens": INT,
             "ttft_s": NUM, "t_first": NUM,  # the end may repeat the first-token time
             # chunk data and an estimated count (v2 optional fields, docs/metrics.md)
             "chunks": INT, "max_gap_s": NUM, "gaps_over": INT, "gap_threshold_s": NUM,
             "output_tokens_estimated": BOOL},
            ("e2e_s", "t_end")),
}
ALT_TYPES = {"ttft_s": NUM, "t_first": NUM, "e2e_s": NUM, "t_end": NUM}
LABEL_MAX = {"request_id": 128, "model": 200, "gateway": 200, "replica": 200, "finish_reason": 64}


def _is(value, t):
    if isinstance(value, bool) or t == BOOL:
        return isinstance(value, bool) and t == BOOL
    return isinstance(value, int) if t == INT else isinstance(value, (int, float)) if t == NUM \
        else isinstance(value, str)


def check_phase(event: dict) -> None:
    assert event["schema_version"] == 2 and not isinstance(event["schema_version"], bool)
    kind = event["kind"]
    required, optional, either = CONTRACT[kind]
    rid = event["request_id"]
    assert isinstance(rid, str) and 1 <= len(rid) <= 128
    allowed = {"schema_version", "kind", "request_id", *required, *optional, *either}
    assert set(event) <= allowed, set(event) - allowed
    assert None not in event.values(), "unknown optional fields are omitted, never null"
    assert set(required) <= set(event)
    assert {"schema_version", "kind", "request_id"} <= set(event)
    if either:
        assert sum(name in event for name in either) == 1, either
    for name, value in event.items():
        t = required.get(name) or optional.get(name) or ALT_TYPES.get(name)
        if t is not None:
            assert _is(value, t), (name, value)
        if name in ("ttft_s", "e2e_s", "queue_s"):
            assert 0 <= value <= 86_400, name
        if name in ("t0", "t_first", "t_end"):
            assert math.isfinite(value) and value > 0, name
        if name in ("input_tokens", "output_tokens", "cached_input_tokens"):
            assert 0 <= value <= 10_000_000, name
        if name in LABEL_MAX:
            assert 1 <= len(value) <= LABEL_MAX[name], name
    if "status" in event:
        assert event["status"] in ("ok", "error", "cancelled")
    if kind == "start" and "cached_input_tokens" in event:
        assert event["cached_input_tokens"] <= event["input_tokens"]


def wire(fake) -> list[dict]:
    """Every record: key is request_id, value is compact JSON; returns events."""
    out = []
    assert fake.records, "each caller drives at least one generation"
    for topic, key, value in fake.records:
        event = json.loads(value.decode("utf-8"))
        assert topic == "t"
        assert value == json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        assert key == event["request_id"].encode("utf-8")
        out.append(event)
    return out


def fixed_clocks(monkeypatch, mono, wall=(1_767_225_600.5,)):
    mono, wall = iter(mono), iter(wall)
    clock = types.SimpleNamespace(monotonic=lambda: next(mono), time=lambda: next(wall))
    monkeypatch.setattr(phases_mod, "time", clock)
    monkeypatch.setattr(generation_mod, "time", clock)


# -- context manager -------------------------------------------------------------
def test_normal_generation_sends_three_phases_in_order(meters, monkeypatch):
    meter, fake = meters(gateway="gw-1", phase_events=True)
    fixed_clocks(monkeypatch, [100.0, 100.25, 100.5, 102.0])
    with meter.generation(model="llama", input_tokens=1200, replica="r1", cached_input_tokens=1024) as g:
        assert isinstance(g, PhaseGeneration) and isinstance(g, Generation)
        assert meter.stats().enqueued == 1  # start is sent at creation
        rid = g.request_id
        assert len(rid) == 32 and rid[12] == "4"
        g.scheduled()
        g.first_token()
        g.first_token()  # ignored: the clock iterator would run dry if it were read
        g.finish(output_tokens=57, status="ok", finish_reason="stop")
    assert meter.flush()
    events = wire(fake)
    for e in events:
        check_phase(e)
    assert [e["kind"] for e in events] == ["start", "first_token", "end"]
    assert {e["request_id"] for e in events} == {rid}
    assert [value for _, _, value in fake.records] == [
        ('{"schema_version":2,"kind":"start","request_id":"%s","model":"llama","t0":1767225600.5,'
         '"input_tokens":1200,"cached_input_tokens":1024,"gateway":"gw-1","replica":"r1"}' % rid).encode(),
        ('{"schema_version":2,"kind":"first_token","request_id":"%s","ttft_s":0.5,"queue_s":0.25}'
         % rid).encode(),
        ('{"schema_version":2,"kind":"end","request_id":"%s","output_tokens":57,"e2e_s":2.0,'
         '"status":"ok","finish_reason":"stop","ttft_s":0.5}' % rid).encode(),
    ]
    assert meter.stats() == EmitterStats(enqueued=3, sent=3, dropped=0, failed=0, queued=0)


def test_given_request_id_and_no_labels_omit_optional_fields(meters):
    meter, fake = meters(phase_events=True)  # no gateway
    wall, before = time.time(), time.monotonic()  # the caller's clocks around the generation
    with meter.generation(model="m", input_tokens=3, request_id="rq-é") as g:
        g.first_token()
        g.finish(output_tokens=2)
    watched, wall_after = time.monotonic() - before, time.time()
    assert meter.flush()
    start, first, end = wire(fake)
    assert list(start) == ["schema_version", "kind", "request_id", "model", "t0", "input_tokens"]
    assert list(first) == ["schema_version", "kind", "request_id", "ttft_s"]
    assert list(end) == ["schema_version", "kind", "request_id", "output_tokens", "e2e_s", "status", "ttft_s"]
    assert start["request_id"] == "rq-é" and fake.records[0][1] == "rq-é".encode("utf-8")
    assert wall <= start["t0"] <= wall_after
    assert 0 <= first["ttft_s"] <= end["e2e_s"] <= watched and end["status"] == "ok"
    assert end["ttft_s"] == first["ttft_s"]


def test_no_finish_is_cancelled(meters):
    meter, fake = meters(phase_events=True)
    with meter.generation(model="m", input_tokens=3) as g:
        g.first_token()
    assert meter.flush()
    start, first, end = wire(fake)
    assert (end["status"], end["output_tokens"]) == ("cancelled", 0) and "finish_reason" not in end
    check_phase(end)


@pytest.mark.parametrize("exc_type", [GeneratorExit, asyncio.CancelledError])
def test_client_disconnect_is_cancelled(meters, exc_type):
    meter, fake = meters(phase_events=True)
    with pytest.raises(exc_type):
        with meter.generation(model="m", input_tokens=5) as g:
            g.first_token()
            raise exc_type()
    assert meter.flush()
    assert [(e["kind"], e.get("status")) for e in wire(fake)] == [
        ("start", None), ("first_token", None), ("end", "cancelled")]


def test_exception_in_block_is_error_and_propagates(meters):
    meter, fake = meters(phase_events=True)
    with pytest.raises(KeyError):
        with meter.generation(model="m", input_tokens=3) as g:
            g.scheduled()
            raise KeyError("engine died")
    assert meter.flush()
    start, end = wire(fake)  # no first token: no first_token event
    assert (end["status"], end["output_tokens"]) == ("error", 0) and "finish_reason" not in end
    assert "queue_s" in end and "queue_s" not in start  # queue_s rides on end when no first token
    check_phase(end)


def test_output_tokens_one(meters):
    meter, fake = meters(phase_events=True)
    with meter.generation(model="m", input_tokens=7) as g:
        g.first_token()
        g.finish(output_tokens=1, finish_reason="length")
    assert meter.flush()
    start, first, end = wire(fake)
    assert (end["output_tokens"], end["finish_reason"], end["status"]) == (1, "length", "ok")
    assert 0 <= first["ttft_s"] <= end["e2e_s"]


def test_first_token_never_called(meters, monkeypatch):
    meter, fake = meters(phase_events=True)
    fixed_clocks(monkeypatch, [10.0, 13.5])
    with meter.generation(model="m", input_tokens=7) as g:
        g.finish(output_tokens=0, status="error", finish_reason="oom")
    assert meter.flush()
    start, end = wire(fake)
    assert end == {"schema_version": 2, "kind": "end", "request_id": start["request_id"], "output_tokens": 0,
                   "e2e_s": 3.5, "status": "error", "finish_reason": "oom"}


@pytest.mark.parametrize("order, on_first, on_end", [
    ("scheduled,first", 0.25, None),  # known by first_token: sent there, not again
    ("first,scheduled", None, 0.5),  # only known after: rides on end
    ("first", None, None),  # never scheduled: never sent
])
def test_queue_s_goes_on_the_first_phase_that_knows_it(meters, monkeypatch, order, on_first, on_end):
    meter, fake = meters(phase_events=True)
    fixed_clocks(monkeypatch, [100.0, 100.25, 100.5, 101.0])
    with meter.generation(model="m", input_tokens=3) as g:
        for step in order.split(","):
            g.scheduled() if step == "scheduled" else g.first_token()
        g.finish(output_tokens=4)
    assert meter.flush()
    start, first, end = wire(fake)
    assert "queue_s" not in start
    assert first.get("queue_s") == on_first and end.get("queue_s") == on_end


def test_finish_twice_and_calls_after_finish(meters):
    meter, fake = meters(phase_events=True)
    with meter.generation(model="m", input_tokens=3) as g:
        with pytest.raises(ValueError, match="output_tokens"):
            g.finish(output_tokens=-1)  # rejected before anything is sent
        g.finish(output_tokens=2, status="cancelled", finish_reason="abort")
        g.first_token()  # after finish: ignored, no event
        with pytest.raises(RuntimeError, match="finish"):
            g.finish(output_tokens=3)
    assert meter.flush()
    assert [e["kind"] for e in wire(fake)] == ["start", "end"]
    assert meter.stats().enqueued == 2


def test_generation_bad_args_send_nothing(meters):
    meter, _ = meters(phase_events=True)
    with pytest.raises(ValueError, match="cached_input_tokens"):
        meter.generation(model="m", input_tokens=3, cached_input_tokens=4)
    with pytest.raises(ValueError, match="request_id"):
        meter.generation(model="m", input_tokens=3, request_id="")
    assert meter.stats() == EmitterStats(0, 0, 0, 0, 0, refused=2)


def test_per_call_override_both_ways(meters):
    meter, fake = meters()  # default: one event per generation
    with meter.generation(model="m", input_tokens=3, phase_events=True) as g:
        g.finish(output_tokens=1)
    with meter.generation(model="m", input_tokens=3, phase_events=None) as g:
        g.finish(output_tokens=1)
    phased, fake2 = meters(phase_events=True)
    with phased.generation(model="m", input_tokens=3, phase_events=False) as g:
        assert type(g) is Generation
        g.finish(output_tokens=1)
    assert meter.flush() and phased.flush()
    assert [e["kind"] for e in wire(fake)] == ["start", "end", "generation"]
    (event,) = wire(fake2)
    assert event["kind"] == "generation" and event["schema_version"] == 1
    check_schema(event)


def test_phase_events_flag_is_validated():
    with pytest.raises(ValueError, match="phase_events"):
        Meter(bootstrap_servers="x:1", phase_events="yes")


# -- one-event mode unchanged ------------------------------------------------------
def test_one_event_mode_is_byte_for_byte_unchanged(meters, monkeypatch):
    # The literal is what the emitter sent before phase events existed.
    expected = (b'{"schema_version":1,"kind":"generation","request_id":"rq-1","model":"llama",'
                b'"t0":1767225600.5,"ttft_s":0.5,"e2e_s":2.0,"queue_s":0.25,"input_tokens":1200,'
                b'"output_tokens":57,"cached_input_tokens":1024,"status":"ok","finish_reason":"stop",'
                b'"gateway":"gw-1","replica":"r1"}')
    modes = (({}, {}), ({"phase_events": False}, {}), ({"phase_events": True}, {"phase_events": False}))
    for kw, call_kw in modes:
        meter, fake = meters(gateway="gw-1", **kw)
        fixed_clocks(monkeypatch, [100.0, 100.25, 100.5, 102.0])
        with meter.generation(model="llama", input_tokens=1200, replica="r1", cached_input_tokens=1024,
                              request_id="rq-1", **call_kw) as g:
            assert type(g) is Generation
            g.scheduled()
            g.first_token()
            g.finish(output_tokens=57, status="ok", finish_reason="stop")
        meter.record(model="m", input_tokens=10, output_tokens=2, t0=1.7e9, e2e_s=0.5, request_id="rq-2")
        assert meter.flush()
        assert fake.records[0] == ("t", b"rq-1", expected)
        assert list(json.loads(fake.records[1][2])) == list(SCHEMA["properties"])
        assert meter.stats().enqueued == 2


def test_phase_tuples_never_look_like_generation_tuples():
    items = [phases_mod.start_item("m", 1, None, "r", None, None, None),
             phases_mod.first_token_item("r", 0.1, None, None, None),
             phases_mod.end_item("r", 1, 0.2, None, "ok", None, None, None)]
    assert all(len(i) != len(generation_mod.EVENT_FIELDS) for i in items)
    assert sender_mod._GEN_LEN == len(generation_mod.EVENT_FIELDS)


# -- low-level API -----------------------------------------------------------------
def test_low_level_api_durations(meters):
    meter, fake = meters(gateway="gw")
    rid = meter.start(model="m", input_tokens=100, t0=1_800_000_000.0, cached_input_tokens=40,
                      queue_s=0.01, replica="r0")
    assert len(rid) == 32
    meter.first_token(rid, ttft_s=0.2)
    meter.end(rid, output_tokens=9, e2e_s=1.5, status="cancelled", finish_reason="client")
    assert meter.flush()
    assert [value for _, _, value in fake.records] == [
        ('{"schema_version":2,"kind":"start","request_id":"%s","model":"m","t0":1800000000.0,'
         '"input_tokens":100,"cached_input_tokens":40,"queue_s":0.01,"gateway":"gw","replica":"r0"}'
         % rid).encode(),
        b'{"schema_version":2,"kind":"first_token","request_id":"%s","ttft_s":0.2}' % rid.encode(),
        b'{"schema_version":2,"kind":"end","request_id":"%s","output_tokens":9,"e2e_s":1.5,'
        b'"status":"cancelled","finish_reason":"client"}' % rid.encode(),
    ]
    for e in wire(fake):
        check_phase(e)


def test_low_level_api_timestamps_and_late_fields(meters):
    meter, fake = meters()
    before = time.time()
    rid = meter.start(model="m", input_tokens=100, request_id="given")
    assert rid == "given"
    meter.first_token(rid, t_first=1_800_000_000.5, queue_s=0.05, cached_input_tokens=64)
    meter.end(rid, output_tokens=0, t_end=1_800_000_003, queue_s=0.07, cached_input_tokens=0)
    assert meter.flush()
    start, first, end = wire(fake)
    assert before <= start["t0"] <= time.time()
    assert first == {"schema_version": 2, "kind": "first_token", "request_id": "given",
                     "t_first": 1_800_000_000.5, "queue_s": 0.05, "cached_input_tokens": 64}
    assert end == {"schema_version": 2, "kind": "end", "request_id": "given", "output_tokens": 0,
                   "t_end": 1_800_000_003, "status": "ok", "queue_s": 0.07, "cached_input_tokens": 0}
    for e in (start, first, end):
        check_phase(e)


def test_low_level_api_keeps_no_state(meters):
    # Phases are independent messages: an end without a start is sent as is
    # (the worker decides), and nothing is remembered per request_id.
    meter, fake = meters()
    meter.end("never-started", output_tokens=1, e2e_s=0.1)
    meter.first_token("never-started", ttft_s=0.05)
    assert meter.flush()
    assert [e["kind"] for e in wire(fake)] == ["end", "first_token"]


START = {"model": "m", "input_tokens": 10}
FIRST = {"ttft_s": 0.1}
END = {"output_tokens": 1, "e2e_s": 1.0}


@pytest.mark.parametrize("call, bad, match", [
    ("start", {"model": ""}, "model"),
    ("start", {"model": None}, "model"),
    ("start", {"input_tokens": -1}, "input_tokens"),
    ("start", {"input_tokens": "5"}, "input_tokens"),
    ("start", {"input_tokens": 2.5}, "input_tokens"),
    ("start", {"cached_input_tokens": 11}, "cached_input_tokens"),
    ("start", {"cached_input_tokens": True}, "cached_input_tokens"),
    ("start", {"t0": 1_800_000_000_000.0}, "t0 must be epoch seconds"),  # milliseconds
    ("start", {"t0": float("nan")}, "t0"),
    ("start", {"t0": "now"}, "t0"),
    ("start", {"queue_s": -0.1}, "queue_s"),
    ("start", {"queue_s": "0.1"}, "queue_s"),
    ("start", {"request_id": ""}, "request_id"),
    ("start", {"request_id": "r" * 129}, "request_id"),
    ("start", {"replica": 3}, "replica"),
    ("first_token", {"request_id": None}, "request_id"),
    ("first_token", {"ttft_s": None}, "exactly one of ttft_s .* or t_first"),
    ("first_token", {"t_first": 1_800_000_000.0}, "exactly one of ttft_s .* or t_first .*not both"),
    ("first_token", {"ttft_s": -1.0}, "ttft_s"),
    ("first_token", {"ttft_s": 90_000.0}, "ttft_s"),
    ("first_token", {"ttft_s": float("inf")}, "ttft_s"),
    ("first_token", {"ttft_s": "0.1"}, "ttft_s"),
    ("first_token", {"ttft_s": None, "t_first": 1.8e12}, "t_first"),
    ("first_token", {"queue_s": -1}, "queue_s"),
    ("first_token", {"cached_input_tokens": -1}, "cached_input_tokens"),
    ("end", {"request_id": 7}, "request_id"),
    ("end", {"output_tokens": -1}, "output_tokens"),
    ("end", {"output_tokens": None}, "output_tokens"),
    ("end", {"output_tokens": 1.5}, "output_tokens"),
    ("end", {"status": "okay"}, "status"),
    ("end", {"status": "abandoned"}, "status"),  # the worker's verdict, never the gateway's
    ("end", {"finish_reason": "x" * 65}, "finish_reason"),
    ("end", {"e2e_s": None}, "exactly one of e2e_s .* or t_end"),
    ("end", {"t_end": 1_800_000_000.0}, "not both"),
    ("end", {"e2e_s": -0.5}, "e2e_s"),
    ("end", {"e2e_s": None, "t_end": float("nan")}, "t_end"),
    ("end", {"queue_s": 100_000.0}, "queue_s"),
    ("end", {"cached_input_tokens": "3"}, "cached_input_tokens"),
])
def test_low_level_bad_args_raise_value_error_naming_the_argument(meters, call, bad, match):
    meter, _ = meters()
    with pytest.raises(ValueError, match=match):
        if call == "start":
            meter.start(**{**START, **bad})
        else:
            args = {**(FIRST if call == "first_token" else END), **bad}
            rid = args.pop("request_id", "rq-1")
            getattr(meter, call)(rid, **args)
    assert meter.stats() == EmitterStats(0, 0, 0, 0, 0, refused=1)


# -- envelopes ---------------------------------------------------------------------
def gated(fake):
    """A factory that holds the sender until released, so everything put
    before the release goes out in one take (deterministic envelopes)."""
    ready = threading.Event()

    def factory(**kw):
        ready.wait(5)
        return fake.factory(**kw)

    return factory, ready


def make_gated(envelope_size, **kw):
    fake = FakeProducer()
    factory, ready = gated(fake)
    meter = Meter(bootstrap_servers="127.0.0.1:1", topic="t", producer_factory=factory,
                  envelope_size=envelope_size, flush_timeout_s=2.0, **kw)
    return meter, fake, ready


def test_envelope_with_phase_events_is_v2_keeps_inner_bytes_and_the_key_partition():
    from phasemeter.producers.envelopes import partition_of

    meter, fake, ready = make_gated(100, gateway="gw")
    try:
        meter.record(model="m", input_tokens=1, output_tokens=2, t0=1_800_000_000.0, e2e_s=0.5,
                     request_id="g1")
        with meter.generation(model="m", input_tokens=3, phase_events=True) as g:
            g.first_token()
            g.finish(output_tokens=4)
        ready.set()
        assert meter.flush()
        # The generation goes unkeyed; the phases in one envelope to the
        # partition their request_id maps to, as keyed messages would.
        (_, gkey, gbody), (_, key, body) = fake.records
        assert gkey is None and key is None
        assert fake.partitions == [None, partition_of(g.request_id.encode(), [0, 1, 2, 3])]
        assert gbody.startswith(b'{"schema_version":1,"kind":"batch","events":[{"schema_version":1,')
        (gen,) = json.loads(gbody)["events"]
        check_schema(gen)
        assert body.startswith(b'{"schema_version":2,"kind":"batch","events":[')
        env = json.loads(body)
        assert list(env) == ["schema_version", "kind", "events"]
        inner = env["events"]
        assert [e["kind"] for e in inner] == ["start", "first_token", "end"]
        for e in inner:
            check_phase(e)
        assert inner[0]["gateway"] == "gw"
        assert meter.stats() == EmitterStats(enqueued=4, sent=4, dropped=0, failed=0, queued=0)
    finally:
        meter.close(timeout_s=0.5)


def test_envelopes_of_generation_events_only_stay_v1():
    meter, fake, ready = make_gated(2, phase_events=True)
    try:
        for i in range(2):
            meter.record(model="m", input_tokens=i, output_tokens=2, t0=1_800_000_000.0, e2e_s=0.5)
        rid = meter.start(model="m", input_tokens=5)
        meter.end(rid, output_tokens=0, e2e_s=0.1, status="error")
        meter.record(model="m", input_tokens=9, output_tokens=2, t0=1_800_000_000.0, e2e_s=0.5)
        meter.first_token("other", ttft_s=0.3)
        ready.set()
        assert meter.flush()
        envs = [json.loads(v) for _, _, v in fake.records]
        # Generations in unkeyed envelopes; phases grouped by their key's partition.
        assert [(e["schema_version"], [i["kind"] for i in e["events"]]) for e in envs] == [
            (1, ["generation", "generation"]), (1, ["generation"]), (2, ["start", "end"]), (2, ["first_token"])]
        assert fake.records[0][2].startswith(b'{"schema_version":1,"kind":"batch","events":[')
        st = meter.stats()
        assert (st.enqueued, st.sent, st.failed, st.queued) == (6, 6, 0, 0)
    finally:
        meter.close(timeout_s=0.5)


def test_unencodable_phase_counts_as_failed_in_both_modes(meters):
    for size in (1, 10):
        meter, fake = meters(envelope_size=size)
        meter._put(("mystery", "rq"))  # a bug upstream must not kill the sender
        meter.start(model="m", input_tokens=1)
        assert meter.flush()
        s = meter.stats()
        assert (s.sent, s.failed, s.queued) == (1, 1, 0)
        invariant(s, 2)


# -- counters ----------------------------------------------------------------------
def test_each_phase_counts_as_one_event_and_the_bound_is_shared(meters):
    meter, fake = meters(FakeProducer(mode="hold"), queue_size=4, phase_events=True)
    with meter.generation(model="m", input_tokens=3) as g:  # 3 events
        g.first_token()
        g.finish(output_tokens=1)
    meter.record(**{"model": "m", "input_tokens": 1, "output_tokens": 1, "t0": 1.0, "e2e_s": 0.1})  # 4th
    with meter.generation(model="m", input_tokens=3) as g:  # start, first_token, end: all dropped
        g.first_token()
    assert meter.flush(timeout_s=0.2) is False
    s = meter.stats()
    assert (s.enqueued, s.dropped, s.queued, s.sent) == (4, 3, 4, 0)
    invariant(s, 7)
    for fut in fake.pending:
        fut.success()
    fake.mode = "ok"
    rid = meter.start(model="m", input_tokens=1)
    meter.end(rid, output_tokens=0, e2e_s=0.0)
    assert meter.flush()
    assert meter.stats() == EmitterStats(enqueued=6, sent=6, dropped=3, failed=0, queued=0)


def test_invariant_under_concurrent_mixed_callers(meters):
    meter, fake = meters(FakeProducer(mode=lambda i: "fail" if i % 7 == 0 else "ok"), queue_size=30)
    per_thread, n_threads = 300, 4

    def work(k):
        for i in range(per_thread):
            with meter.generation(model="m", input_tokens=5, phase_events=bool((i + k) % 2)) as g:
                g.first_token()
                g.finish(output_tokens=i)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert meter.flush(timeout_s=5)
    attempted = n_threads * per_thread // 2 * (1 + 3)  # half one-event, half three phases
    s = meter.stats()
    invariant(s, attempted)
    assert s.queued == 0 and s.sent > 0
    for e in wire(fake):
        check_phase(e) if e["schema_version"] == 2 else check_schema(e)
