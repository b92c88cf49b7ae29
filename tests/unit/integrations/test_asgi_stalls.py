"""PhasemeterMiddleware's chunk hook: every content-carrying SSE data event
(the kind the first token is) is one timed chunk. Driven directly (tiny ASGI
apps, as test_asgi_middleware.py); real uvicorn in tests/integration/
test_asgi_stalls_uvicorn.py.

The app sleeps before sending each event, so a gap is at least its scripted
sleep whatever the load (asyncio never wakes early by more than its clock
resolution: SLACK); above, a gap is held only to the generation."""

from __future__ import annotations

import json

import pytest
from kafka_events import unwrap
from test_asgi_middleware import USAGE, Client, MemoryProducer, chunk, meter, run, sse, streaming_app  # noqa: F401

from phasemeter.integrations.asgi import PhasemeterMiddleware
from phasemeter.integrations.sse import TAIL_EVENTS
from phasemeter.producers import Meter
from phasemeter.stream_jobs.contract import STALL_FIELDS

SLACK = 0.002
THRESHOLD = 0.1


@pytest.fixture
def slow_meter():
    """A Meter whose stall threshold is THRESHOLD, collecting its events in memory."""
    made = []
    m = Meter("unused:9092", topic="t", stall_threshold_s=THRESHOLD,
              producer_factory=lambda **kw: made.append(MemoryProducer()) or made[-1])

    def events():
        assert m.flush(5)
        return [e for p in made for _, v in p.sent for e in unwrap(v)]

    m.events = events
    yield m
    m.close()


def stream(n: int, stall_at: int | None = None, stall_s: float = 0.0, gap_s: float = 0.002):
    """Role chunk, n content events, finish chunk, usage, [DONE]; delays per event."""
    events = [sse(chunk("", role="assistant"))] + [sse(chunk(f"t{i} ")) for i in range(n)] + \
        [sse(chunk(finish="stop")), sse(USAGE), sse(b"[DONE]")]
    delays = [0.0] + [gap_s + (stall_s if i == stall_at else 0.0) for i in range(n)] + [0.0, 0.0, 0.0]
    return events, delays


@pytest.mark.parametrize("stall_at", [5, 37])  # mid-stream (timed as it leaves the ring) and in the tail
def test_a_stall_is_the_largest_gap_wherever_it_falls(slow_meter, stall_at):
    n, stall = 40, 0.25
    assert stall_at < n - TAIL_EVENTS or stall_at >= n + 4 - TAIL_EVENTS  # one case each side of the ring
    events, delays = stream(n, stall_at, stall)
    run(PhasemeterMiddleware(streaming_app(events, delays), slow_meter), Client())
    (ev,) = slow_meter.events()
    assert ev["schema_version"] == 2 and ev["chunks"] == n  # not the role, finish or usage events
    assert ev["gap_threshold_s"] == THRESHOLD
    assert stall - SLACK <= ev["max_gap_s"] <= ev["e2e_s"] - ev["ttft_s"]
    assert 1 <= ev["gaps_over"] <= n - 1  # the scripted one; a loaded machine may add more


@pytest.mark.parametrize("split", ["bytes", "one"])
def test_events_split_across_body_chunks_count_once(meter, split):
    events, _ = stream(20)
    whole = b"".join(events)
    parts = [whole[i:i + 1] for i in range(len(whole))] if split == "bytes" else [whole]
    run(PhasemeterMiddleware(streaming_app(parts), meter), Client())
    (ev,) = meter.events()
    assert ev["chunks"] == 20 and ev["gap_threshold_s"] == 0.5
    if split == "one":  # all in one body chunk: arrived together, no gap
        assert (ev["max_gap_s"], ev["gaps_over"]) == (0.0, 0)


@pytest.mark.parametrize("n", [2, 3 * TAIL_EVENTS])  # the whole stream in the ring, or most of it gone through
def test_trailing_events_without_content_are_not_chunks(meter, n):
    # After the last token: an empty content, a null content (Python's spaced
    # JSON), the finish chunk, a comment, the usage chunk, [DONE].
    null = b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": None}}]}).encode() + b"\n\n"
    body = [sse(chunk("", role="assistant"))] + [sse(chunk(f"t{i}")) for i in range(n)] + \
        [sse(chunk("")), null, sse(chunk(finish="stop")), b": keep-alive\n\n", sse(USAGE), sse(b"[DONE]")]
    run(PhasemeterMiddleware(streaming_app(body), meter), Client())
    (ev,) = meter.events()
    assert ev["chunks"] == n and ev["finish_reason"] == "stop" and ev["output_tokens"] == 3


def test_tool_call_deltas_are_chunks(meter):
    call = {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}}]}
    body = [sse(chunk("", role="assistant"))] + [sse(call)] * 12 + [sse(chunk(finish="tool_calls")), sse(USAGE)]
    run(PhasemeterMiddleware(streaming_app(body), meter), Client())
    assert meter.events()[0]["chunks"] == 12


def test_an_event_without_content_before_the_last_token_is_counted(meter):
    """The documented limit (docs/ingest/asgi.md): events after the first token
    are not read one by one (that would cost a JSON parse each), so an empty
    delta between two tokens counts as a chunk; trailing ones do not."""
    body = [sse(chunk("Hi")), sse(chunk("")), sse(chunk("x")), sse(chunk(finish="stop")), sse(USAGE)]
    run(PhasemeterMiddleware(streaming_app(body), meter), Client())
    assert meter.events()[0]["chunks"] == 3


def test_a_json_response_or_a_stream_without_content_carries_no_chunk_fields(meter):
    whole = json.dumps({"choices": [{"index": 0, "message": {"content": "ok"}, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 5, "completion_tokens": 1}}).encode()
    run(PhasemeterMiddleware(streaming_app([whole], content_type=b"application/json"), meter), Client())
    empty = [sse(chunk("", role="assistant")), sse(chunk(finish="stop")),
             sse({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 0}}), sse(b"[DONE]")]
    run(PhasemeterMiddleware(streaming_app(empty), meter), Client())
    single = [sse(chunk("one")), sse(chunk(finish="stop")), sse(USAGE), sse(b"[DONE]")]
    run(PhasemeterMiddleware(streaming_app(single), meter), Client())
    json_ev, empty_ev, single_ev = meter.events()
    for ev in (json_ev, empty_ev):
        assert not set(STALL_FIELDS) & set(ev), ev  # absent, never 0
    # v2 only for `streamed: false` (a whole JSON answer); the SSE stream stays v1
    assert (json_ev["schema_version"], json_ev["streamed"], empty_ev["schema_version"]) == (2, False, 1)
    assert (single_ev["chunks"], single_ev["gaps_over"]) == (1, 0) and "max_gap_s" not in single_ev

