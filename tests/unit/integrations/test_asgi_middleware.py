"""PhasemeterMiddleware driven directly: tiny ASGI apps, scripted receive/send.

The Meter is real; its producer is an in-memory one collecting what would
have gone to Kafka, so each test reads back the encoded event itself.
"""

from __future__ import annotations

import asyncio
import json
import random
import time

import pytest

from kafka_events import unwrap

from phasemeter.integrations.asgi import PhasemeterMiddleware
from phasemeter.producers import Meter
from phasemeter.stream_jobs.derive import validate


class MemoryFuture:
    def add_callback(self, f):
        f(None)
        return self

    def add_errback(self, f):
        return self


class MemoryProducer:
    """What Meter(producer_factory=...) needs: send, flush, close."""

    def __init__(self, **kwargs):
        self.sent: list[tuple[bytes, bytes]] = []

    def partitions_for(self, topic):
        return {0, 1, 2, 3}

    def send(self, topic, key=None, value=None, partition=None):
        self.sent.append((key, value))
        return MemoryFuture()


    def flush(self, timeout=None):
        pass

    def close(self, timeout=None):
        pass


@pytest.fixture
def meter():
    producers = []

    def factory(**kw):
        producers.append(MemoryProducer(**kw))
        return producers[-1]

    m = Meter("unused:9092", topic="t", producer_factory=factory)

    def events():
        assert m.flush(5)
        return [e for p in producers for _, v in p.sent for e in unwrap(v)]

    m.events = events
    yield m
    m.close()


def sse(obj) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


def chunk(content=None, finish=None, role=None):
    delta = {}
    if role:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    return {"id": "c1", "object": "chat.completion.chunk", "model": "llama-3.1-8b",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


USAGE = {"id": "c1", "choices": [], "usage": {"prompt_tokens": 1200, "completion_tokens": 3, "total_tokens": 1203,
                                               "prompt_tokens_details": {"cached_tokens": 1024}}}
STREAM = [sse(chunk("", role="assistant")), sse(chunk("Hel")), sse(chunk("lo")), sse(chunk("!")),
          sse(chunk(finish="stop")), sse(USAGE), sse(b"[DONE]")]
REQUEST = json.dumps({"model": "llama-3.1-8b", "stream": True, "messages": [{"role": "user", "content": "hi"}],
                      "stream_options": {"include_usage": True}}).encode()


def scope(path="/v1/chat/completions", method="POST", kind="http"):
    return {"type": kind, "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "path": path,
            "raw_path": path.encode(), "query_string": b"", "headers": [(b"content-type", b"application/json")]}


class Client:
    """The server side of one request: a body in parts, then (optionally) a disconnect."""

    def __init__(self, body=REQUEST, parts=1, disconnect_after=None):
        step = max(1, len(body) // parts)
        pieces = [body[i:i + step] for i in range(0, len(body), step)] or [b""]
        self.inbox = [{"type": "http.request", "body": p, "more_body": i < len(pieces) - 1}
                      for i, p in enumerate(pieces)]
        self.disconnect_after = disconnect_after
        self.sent: list[dict] = []
        self.at: list[float] = []  # the caller's clock: when each message reached the client
        self.began = self.took = None  # set by run()

    def by(self, i: int) -> float:
        """When message i reached the client, since the request began: an
        upper bound for a time the middleware took before forwarding it."""
        return self.at[i] - self.began

    async def receive(self):
        if self.inbox:
            return self.inbox.pop(0)
        if self.disconnect_after is None:
            await asyncio.Event().wait()  # like a server: nothing more until the client leaves
        await asyncio.sleep(self.disconnect_after)
        return {"type": "http.disconnect"}

    async def send(self, message):
        self.sent.append(message)
        self.at.append(time.monotonic())

    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")


async def read_body(receive) -> bytes:
    body = b""
    while True:
        m = await receive()
        body += m.get("body", b"")
        if not m.get("more_body"):
            return body


def streaming_app(chunks, delays=None, status=200, content_type=b"text/event-stream"):
    """Reads the whole request body, then sends `chunks` after `delays`."""
    async def app(scope, receive, send):
        await read_body(receive)
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", content_type)]})
        for i, c in enumerate(chunks):
            if delays:
                await asyncio.sleep(delays[i])
            await send({"type": "http.response.body", "body": c, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    return app


def run(app, client, s=None):
    """One request; `client.took` is the caller's clock around all of it."""
    client.began = time.monotonic()
    asyncio.run(app(s or scope(), client.receive, client.send))
    client.took = time.monotonic() - client.began


def test_sse_stream_timings_usage_and_every_chunk_forwarded_unchanged(meter):
    delays = [0.0, 0.1, 0.05, 0.05, 0.0, 0.0, 0.0]  # first content after 0.1 s, end after 0.2 s
    app = streaming_app(STREAM, delays)
    client = Client(parts=3)  # the app reads a body in three parts; the middleware only watches
    mw = PhasemeterMiddleware(app, meter)
    run(mw, client)
    assert [m.get("body") for m in client.sent[1:-1]] == STREAM  # same chunks, same order, none held back
    (ev,) = meter.events()
    assert ev["model"] == "llama-3.1-8b" and ev["status"] == "ok" and ev["finish_reason"] == "stop"
    assert (ev["input_tokens"], ev["output_tokens"], ev["cached_input_tokens"]) == (1200, 3, 1024)
    assert 0.1 <= ev["ttft_s"] <= client.by(2)  # client.sent[2]: "Hel", the first content
    assert 0.2 <= ev["e2e_s"] <= client.took and ev["e2e_s"] - ev["ttft_s"] >= 0.1
    assert mw.stats() == {"recorded": 1, "errors": 0, "skipped": {}}


@pytest.mark.parametrize("split", ["bytes", "random", "one", "crlf"])
def test_sse_events_split_anywhere_across_chunks(meter, split):
    whole = b"".join(STREAM)
    if split == "crlf":
        whole = whole.replace(b"\n", b"\r\n")
    if split == "bytes" or split == "crlf":
        chunks = [whole[i:i + 1] for i in range(len(whole))]
    elif split == "random":
        rng, cuts = random.Random(7), []
        cuts = sorted(rng.sample(range(1, len(whole)), 25))
        chunks = [whole[a:b] for a, b in zip([0] + cuts, cuts + [len(whole)], strict=True)]
    else:
        chunks = [whole]
    run(PhasemeterMiddleware(streaming_app(chunks), meter), client := Client())
    assert client.body() == whole
    (ev,) = meter.events()
    assert (ev["input_tokens"], ev["output_tokens"], ev["finish_reason"], ev["status"]) == (1200, 3, "stop", "ok")
    assert ev["ttft_s"] is not None and ev["ttft_s"] <= ev["e2e_s"]


def test_first_token_is_the_chunk_completing_the_first_content_event(meter):
    # The role chunk and an empty content chunk are not tokens; the content
    # event arrives in two halves 0.1 s apart: the second half is the first token.
    content = sse(chunk("Hi"))
    chunks = [sse(chunk("", role="assistant")), sse(chunk("")), content[:10], content[10:], sse(USAGE)]
    run(PhasemeterMiddleware(streaming_app(chunks, [0, 0.05, 0.05, 0.1, 0.05]), meter), client := Client())
    (ev,) = meter.events()
    assert 0.2 <= ev["ttft_s"] <= client.by(4)  # client.sent[4]: the second half; USAGE came later
    assert ev["e2e_s"] >= 0.25


def test_tool_call_and_completions_text_count_as_first_token(meter):
    tool = {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"name": "f"}}]}}]}
    text = {"choices": [{"index": 0, "text": "Once", "finish_reason": None}]}
    clients = []
    for first, path in ((tool, "/v1/chat/completions"), (text, "/v1/completions")):
        chunks = [sse(chunk("", role="assistant")), sse(first), sse(USAGE)]
        run(PhasemeterMiddleware(streaming_app(chunks, [0, 0.1, 0]), meter), client := Client(), scope(path))
        clients.append(client)
    evs = meter.events()
    assert len(evs) == len(clients) == 2
    for e, c in zip(evs, clients, strict=True):
        assert 0.1 <= e["ttft_s"] <= c.by(2)  # c.sent[2]: the tool call or the text


def test_json_response_is_recorded_not_streamed_whatever_its_chunks(meter):
    """A whole JSON answer has no first token: its first body chunk is a
    piece of the end of the generation, so timing it would count the decode
    as prefill (prefill_tps = input / e2e). It is recorded streamed: false
    with no ttft_s, however many chunks the server split it into."""
    body = json.dumps({"id": "x", "object": "chat.completion", "model": "llama-3.1-8b",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"},
                                    "finish_reason": "length"}],
                       "usage": {"prompt_tokens": 40, "completion_tokens": 16}}).encode()
    parts = [b"", body[:30], body[30:]]
    app = streaming_app(parts, [0.05, 0.1, 0.05], content_type=b"application/json")
    run(mw := PhasemeterMiddleware(app, meter), client := Client(json.dumps({"model": "m2"}).encode()))
    assert client.body() == body
    (ev,) = meter.events()
    assert (ev["model"], ev["input_tokens"], ev["output_tokens"], ev["finish_reason"]) == ("m2", 40, 16, "length")
    assert (ev["schema_version"], ev["streamed"], ev["ttft_s"]) == (2, False, None)
    assert 0.2 <= ev["e2e_s"] <= client.took
    assert not {"chunks", "max_gap_s", "gaps_over", "gap_threshold_s"} & set(ev)
    assert isinstance(validate(ev), dict), ev  # what the worker stores (null phases), not dead-letters
    assert mw.stats() == {"recorded": 1, "errors": 0, "skipped": {}}


def test_a_token_stream_that_is_not_sse_is_recorded_not_streamed(meter):
    """The rule is the content type, not the chunking: body chunks of a
    non-SSE response are the transport's (a proxy forwards its upstream's
    reads), so even a line-per-token stream (NDJSON) gives no first token
    the middleware could tell from a piece of one JSON document."""
    lines = [json.dumps({"message": {"content": t}}).encode() + b"\n" for t in ("a", "b", "c")]
    app = streaming_app(lines, [0.1, 0.05, 0.05], content_type=b"application/x-ndjson")
    mw = PhasemeterMiddleware(app, meter, input_tokens=lambda ex: 9, output_tokens=lambda ex: 3)
    run(mw, client := Client())
    (ev,) = meter.events()
    assert (ev["streamed"], ev["ttft_s"], ev["input_tokens"], ev["output_tokens"]) == (False, None, 9, 3)
    assert 0.2 <= ev["e2e_s"] <= client.took and isinstance(validate(ev), dict)
    assert mw.stats()["recorded"] == 1


def test_sse_stream_says_nothing_of_streamed(meter):
    run(PhasemeterMiddleware(streaming_app(STREAM), meter), Client())
    (ev,) = meter.events()
    assert "streamed" not in ev and ev["ttft_s"] is not None  # unchanged: a stream is held to its first token


def test_disconnect_gives_cancelled_at_the_disconnect(meter):
    async def app(scope, receive, send):  # like Starlette: streams while listening for the disconnect
        await read_body(receive)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})

        async def stream():
            await send({"type": "http.response.body", "body": sse(chunk("tok")), "more_body": True})
            while True:
                await asyncio.sleep(0.02)
                await send({"type": "http.response.body", "body": sse(chunk("x")), "more_body": True})

        task = asyncio.ensure_future(stream())
        while (await receive())["type"] != "http.disconnect":
            pass
        task.cancel()

    mw = PhasemeterMiddleware(app, meter, input_tokens=lambda ex: 77)
    run(mw, client := Client(disconnect_after=0.15))
    (ev,) = meter.events()
    assert ev["status"] == "cancelled" and ev["output_tokens"] == 0 and ev["input_tokens"] == 77
    assert ev["ttft_s"] <= client.by(1) and 0.15 <= ev["e2e_s"] <= client.took  # client.sent[1]: "tok"


def test_send_failing_because_the_client_left_is_cancelled_and_propagates(meter):
    class Gone(OSError):
        pass

    client = Client()
    sent = 0

    async def failing_send(message):
        nonlocal sent
        sent += 1
        if sent == 3:
            raise Gone("connection lost")
        client.sent.append(message)

    mw = PhasemeterMiddleware(streaming_app(STREAM), meter, input_tokens=lambda ex: 5)
    with pytest.raises(Gone):
        asyncio.run(mw(scope(), client.receive, failing_send))
    (ev,) = meter.events()
    assert ev["status"] == "cancelled" and ev["input_tokens"] == 5


def test_app_exception_and_5xx_are_errors_and_the_exception_is_the_apps(meter):
    class Boom(ConnectionRefusedError):  # an OSError from the app: its upstream, not the client
        pass

    async def raising(scope, receive, send):
        await read_body(receive)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": sse(chunk("a")), "more_body": True})
        raise Boom()

    mw = PhasemeterMiddleware(raising, meter, input_tokens=lambda ex: 10)
    with pytest.raises(Boom):
        run(mw, Client())
    upstream = PhasemeterMiddleware(streaming_app([b'{"error": "overloaded"}'], status=503,
                                                  content_type=b"application/json"), meter,
                                    input_tokens=lambda ex: 10)
    run(upstream, Client())
    sse_error = PhasemeterMiddleware(streaming_app([sse(chunk("a")), sse({"error": {"message": "engine died"}})]),
                                     meter, input_tokens=lambda ex: 10)
    run(sse_error, Client())
    evs = meter.events()
    assert [e["status"] for e in evs] == ["error", "error", "error"]
    assert evs[0]["ttft_s"] is not None and "streamed" not in evs[0]  # SSE: its first token was timed
    assert (evs[1]["ttft_s"], evs[1]["streamed"]) == (None, False)  # a JSON error answer: nothing streamed


def test_4xx_and_unknown_counts_are_skipped_and_counted_not_invented(meter):
    mw = PhasemeterMiddleware(streaming_app([b'{"error": "bad"}'], status=400, content_type=b"application/json"),
                              meter)
    run(mw, Client())
    no_usage = [sse(chunk("a")), sse(chunk(finish="stop"))]
    run(mw2 := PhasemeterMiddleware(streaming_app(no_usage), meter), Client())
    run(mw3 := PhasemeterMiddleware(streaming_app(STREAM), meter), Client(b"not json"))
    assert meter.events() == []
    assert mw.stats()["skipped"] == {"client_error": 1}
    assert mw2.stats()["skipped"] == {"no_input_tokens": 1}
    assert mw3.stats()["skipped"] == {"no_model": 1}


def test_hooks_win_and_none_falls_back(meter):
    seen = {}

    def out_tokens(ex):
        seen.update(request=ex.request, status=ex.status_code, events=ex.data_events)
        return None  # fall back to usage

    mw = PhasemeterMiddleware(streaming_app(STREAM), meter, model=lambda ex: "alias-" + ex.request["model"],
                              output_tokens=out_tokens, request_id=lambda ex: "req-1", replica=lambda ex: "r0")
    run(mw, Client())
    (ev,) = meter.events()
    assert (ev["model"], ev["request_id"], ev["replica"], ev["output_tokens"]) == ("alias-llama-3.1-8b", "req-1",
                                                                                   "r0", 3)
    assert seen == {"request": json.loads(REQUEST), "status": 200, "events": 6}  # [DONE] not counted


def test_bookkeeping_failures_never_reach_the_app(meter):
    class BrokenMeter:
        def record(self, **kw):
            raise RuntimeError("queue on fire")

    for mw in (PhasemeterMiddleware(streaming_app(STREAM), BrokenMeter()),
               PhasemeterMiddleware(streaming_app(STREAM), meter, model=lambda ex: 1 / 0)):
        run(mw, client := Client())
        assert client.body() == b"".join(STREAM)
        assert mw.stats()["errors"] == 1 and mw.stats()["recorded"] == 0
    # Garbage where SSE was announced: forwarded as is, nothing recorded, nothing raised.
    weird = PhasemeterMiddleware(streaming_app([b"\xff\xfe data: {]\n\n", sse(b"{not json"), b"data"]), meter)
    run(weird, client := Client())
    assert client.body() == b"\xff\xfe data: {]\n\n" + sse(b"{not json") + b"data"
    assert weird.stats()["skipped"] == {"no_input_tokens": 1} and weird.stats()["errors"] == 0


@pytest.mark.parametrize("s", [scope("/v1/models", "GET"), scope("/health"), scope(method="GET"),
                               scope(kind="websocket"), {"type": "lifespan", "asgi": {"version": "3.0"}}])
def test_other_paths_methods_and_scopes_pass_through_untouched(meter, s):
    got = {}

    async def app(scope, receive, send):
        got.update(scope=scope, receive=receive, send=send)

    client = Client()
    mw = PhasemeterMiddleware(app, meter)
    asyncio.run(mw(s, client.receive, client.send))
    assert got["scope"] is s and got["receive"] == client.receive and got["send"] == client.send
    assert meter.events() == [] and mw.stats() == {"recorded": 0, "errors": 0, "skipped": {}}


def test_bad_configuration_is_refused_clearly(meter):
    with pytest.raises(ValueError, match="paths"):
        PhasemeterMiddleware(streaming_app([]), meter, paths="/v1/chat/completions")
    with pytest.raises(ValueError, match="hook model"):
        PhasemeterMiddleware(streaming_app([]), meter, model="gpt")


def test_sse_without_event_boundaries_is_given_up_without_guessing(meter):
    blob = b"x" * 65_536  # announced as SSE, 1.5 MiB with no blank line: parsing stops, memory stays bounded
    app = streaming_app([blob] * 24)
    mw = PhasemeterMiddleware(app, meter, input_tokens=lambda ex: 10, output_tokens=lambda ex: 0)
    run(mw, client := Client())
    assert client.body() == blob * 24
    (ev,) = meter.events()
    assert ev["status"] == "ok" and ev["ttft_s"] is None and ev["output_tokens"] == 0


@pytest.mark.parametrize("body, model", [
    ({"messages": [{"role": "user", "content": 'say "model": "fake"'}], "model": "real"}, "real"),
    ({"model": "real", "metadata": {"model": "other"}}, "real"),      # two keys: the full parse decides
    ({"model": "w\u00e9ird \"quoted\" \\ name", "messages": []}, "w\u00e9ird \"quoted\" \\ name"),
    ({"messages": [{"role": "user", "content": "x" * 300_000}], "model": "long-prompt"}, "long-prompt"),
])
def test_model_is_the_requests_top_level_key(meter, body, model):
    raw = json.dumps(body).encode()
    run(PhasemeterMiddleware(streaming_app(STREAM), meter), Client(raw, parts=7))
    (ev,) = meter.events()
    assert ev["model"] == model


def test_a_request_body_over_the_limit_needs_the_model_hook(meter):
    raw = json.dumps({"model": "m", "messages": [{"content": "x" * (5 << 20)}]}).encode()
    run(mw := PhasemeterMiddleware(streaming_app(STREAM), meter), Client(raw, parts=80))
    assert mw.stats()["skipped"] == {"no_model": 1}
    run(PhasemeterMiddleware(streaming_app(STREAM), meter, model=lambda ex: "from-hook"), Client(raw, parts=80))
    (ev,) = meter.events()
    assert ev["model"] == "from-hook"


def test_a_long_stream_is_read_at_its_end_for_usage_and_finish_reason(meter):
    chunks = [sse(chunk("", role="assistant"))] + [sse(chunk("t")) for _ in range(500)] \
        + [sse(chunk(finish="length")), b": keep-alive\n\n", sse(USAGE), sse(b"[DONE]")]
    seen = {}
    mw = PhasemeterMiddleware(streaming_app(chunks), meter,
                              output_tokens=lambda ex: seen.update(n=ex.data_events))
    run(mw, Client())
    (ev,) = meter.events()
    assert (ev["output_tokens"], ev["finish_reason"], ev["input_tokens"]) == (3, "length", 1200)
    assert seen == {"n": 503}  # role + 500 tokens + finish + usage; comments and [DONE] are not data events
