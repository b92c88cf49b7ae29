"""PhasemeterMiddleware in front of a real Starlette app served by real uvicorn,
read by a real streaming client (httpx); the events go through the real
broker and are read back from the topic.

The app scripts its delays: they are the lower bounds of the times; the
upper bounds come from the client's own clock (the middleware starts after
the client sent the request and stamps a chunk before the client has it).
"Not buffered" is shown causally: the app does not produce chunk 2 until
the client has seen chunk 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import uuid

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from kafka_events import records_in, unwrap
from phasemeter.integrations.asgi import PhasemeterMiddleware
from ports import free_port
from phasemeter.producers import Meter

pytestmark = pytest.mark.integration


class Tapped:
    """A real Meter on a topic of its own on the session's broker, and how
    to read back what reached that topic."""

    def __init__(self, bootstrap: str, **kw):
        self.bootstrap, self.topic = bootstrap, f"asgi-{uuid.uuid4().hex[:10]}"
        self.meter = Meter(bootstrap, topic=self.topic, **kw)

    def events(self) -> list[dict]:
        """Every event on the topic once what the meter queued is acknowledged."""
        assert self.meter.flush(15)
        return [e for r in records_in(self.bootstrap, self.topic) for e in unwrap(r.value)]

    def wait_events(self, n: int, timeout_s: float = 30.0) -> list[dict]:
        """The topic's events once there are at least n (the middleware
        records a disconnect after the client has gone)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            evs = self.events()
            if len(evs) >= n:
                return evs
            time.sleep(0.05)
        raise AssertionError(f"{n} events expected, got {self.events()}")


@contextlib.contextmanager
def serve(app):
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="off", http="h11", loop="asyncio"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(5)


def sse(obj) -> str:
    return "data: " + (obj if isinstance(obj, str) else json.dumps(obj)) + "\n\n"


def delta(content, finish=None):
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": content},
                                                            "finish_reason": finish}]}


USAGE = {"choices": [], "usage": {"prompt_tokens": 900, "completion_tokens": 3}}
REQUEST = {"model": "llama-3.1-8b", "stream": True, "stream_options": {"include_usage": True},
           "messages": [{"role": "user", "content": "hi"}]}


def make_app(state: dict):
    client_saw_first = state["client_saw_first"] = threading.Event()

    async def chat(request):
        body = await request.json()
        request.state.prompt_tokens = 900  # as a tokenizing gateway would; read by a hook
        if not body.get("stream"):
            await asyncio.sleep(0.1)
            return JSONResponse({"object": "chat.completion", "model": body["model"],
                                 "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                              "finish_reason": "stop"}],
                                 "usage": {"prompt_tokens": 12, "completion_tokens": 2}})

        async def tokens():
            yield sse({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
            await asyncio.sleep(0.1)
            yield sse(delta("Hel"))
            if body.get("endless"):
                try:
                    while True:
                        await asyncio.sleep(0.02)
                        yield sse(delta("x"))
                finally:
                    state["stream_stopped"] = time.monotonic()
            # Chunk 2 is produced only once the client has chunk 1: a buffering
            # middleware would make this wait time out.
            state["client_had_chunk_1"] = await asyncio.to_thread(client_saw_first.wait, 5)
            state["chunk_2_at"] = time.monotonic()
            await asyncio.sleep(0.1)
            yield sse(delta("lo"))
            yield sse(delta("!", finish="stop"))
            yield sse(USAGE)
            yield sse("[DONE]")
        return StreamingResponse(tokens(), media_type="text/event-stream")

    async def models(request):
        return JSONResponse({"data": [{"id": "llama-3.1-8b"}]})

    async def embeddings(request):
        await request.body()
        return StreamingResponse(iter([b"a", b"b"]), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]),
                             Route("/v1/models", models), Route("/v1/embeddings", embeddings, methods=["POST"])])


def test_stream_reaches_the_client_unbuffered_and_is_timed(kafka_bootstrap):
    tap = Tapped(kafka_bootstrap)
    meter = tap.meter
    state: dict = {}
    with serve(PhasemeterMiddleware(make_app(state), meter)) as url, httpx.Client(timeout=10) as client:
        t_start = time.monotonic()
        with client.stream("POST", f"{url}/v1/chat/completions", json=REQUEST) as resp:
            got = b""
            for part in resp.iter_raw():
                got += part
                if b'"Hel"' in got and not state["client_saw_first"].is_set():
                    assert "chunk_2_at" not in state  # the client has chunk 1 before chunk 2 exists
                    first = time.monotonic() - t_start
                    state["client_saw_first"].set()
        elapsed = time.monotonic() - t_start
    assert state["client_had_chunk_1"] is True
    assert got.count(b"data: ") == 6 and got.endswith(b"data: [DONE]\n\n")
    (ev,) = tap.events()
    assert (ev["model"], ev["status"], ev["input_tokens"], ev["output_tokens"], ev["finish_reason"]) == \
        ("llama-3.1-8b", "ok", 900, 3, "stop")
    assert 0.1 <= ev["ttft_s"] <= first
    assert ev["e2e_s"] - ev["ttft_s"] >= 0.1 and ev["e2e_s"] <= elapsed
    meter.close()


def test_client_disconnect_records_cancelled_and_stops_the_stream(kafka_bootstrap):
    tap = Tapped(kafka_bootstrap)
    meter = tap.meter
    state: dict = {}
    from_state = lambda ex: ex.scope["state"]["prompt_tokens"]  # noqa: E731 (docs/ingest/asgi.md)
    with serve(PhasemeterMiddleware(make_app(state), meter, input_tokens=from_state)) as url, \
            httpx.Client(timeout=10) as client:
        t_start = time.monotonic()
        with client.stream("POST", f"{url}/v1/chat/completions", json={**REQUEST, "endless": True}) as resp:
            got, first = b"", None
            for part in resp.iter_raw():
                got += part
                if first is None and b'"Hel"' in got:
                    first = time.monotonic() - t_start
                if got.count(b'"x"') >= 3:
                    break  # leaving the block closes the connection mid-stream
        (ev,) = tap.wait_events(1)
        recorded_by = time.monotonic() - t_start
    assert ev["status"] == "cancelled" and ev["output_tokens"] == 0 and ev["input_tokens"] == 900
    assert 0.1 <= ev["ttft_s"] <= first
    # Ends at the disconnect: after the three "x" the client saw (0.02 s
    # apart in the script), before the event reached the topic.
    assert ev["ttft_s"] + 0.06 <= ev["e2e_s"] <= recorded_by
    assert "stream_stopped" in state
    meter.close()


def test_other_paths_are_untouched(kafka_bootstrap):
    tap = Tapped(kafka_bootstrap)
    meter = tap.meter
    with serve(make_app({})) as bare, serve(PhasemeterMiddleware(make_app({}), meter)) as wrapped, \
            httpx.Client(timeout=10) as client:
        for method, path in (("GET", "/v1/models"), ("POST", "/v1/embeddings"), ("GET", "/v1/chat/completions")):
            a = client.request(method, f"{bare}{path}", json={"model": "e"} if method == "POST" else None)
            b = client.request(method, f"{wrapped}{path}", json={"model": "e"} if method == "POST" else None)
            assert (a.status_code, a.content) == (b.status_code, b.content)
            assert [h for h in a.headers.items() if h[0] != "date"] == [h for h in b.headers.items() if h[0] != "date"]
    assert tap.events() == []
    meter.close()


def test_the_documented_proxy(kafka_bootstrap):
    """docs/ingest/asgi.md's FastAPI proxy, with Starlette's equivalents of
    FastAPI's pieces, in front of an upstream engine (the app above)."""
    from starlette.background import BackgroundTask

    tap = Tapped(kafka_bootstrap)
    meter = tap.meter
    state: dict = {}
    engine = make_app(state)
    state["client_saw_first"].set()  # the client here does not pace the engine
    with serve(engine) as upstream_url:
        upstream_client = None

        async def proxy(request):
            nonlocal upstream_client
            upstream_client = upstream_client or httpx.AsyncClient(base_url=upstream_url, timeout=None)
            body = await request.json()
            if body.get("stream"):
                body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
            upstream = await upstream_client.send(
                upstream_client.build_request("POST", request.url.path, json=body), stream=True)
            return StreamingResponse(upstream.aiter_raw(), status_code=upstream.status_code,
                                     media_type=upstream.headers.get("content-type"),
                                     background=BackgroundTask(upstream.aclose))

        api = Starlette(routes=[Route("/v1/chat/completions", proxy, methods=["POST"])])
        app = PhasemeterMiddleware(api, meter)
        with serve(app) as url, httpx.Client(timeout=10) as client:
            # The client does not ask for usage (null, as some SDKs send it); the proxy does.
            t_start = time.monotonic()
            streamed = client.post(f"{url}/v1/chat/completions", json={**REQUEST, "stream_options": None})
            streamed_took = time.monotonic() - t_start
            plain = client.post(f"{url}/v1/chat/completions", json={**REQUEST, "stream": False})
    assert streamed.text.endswith("data: [DONE]\n\n") and plain.json()["usage"]["prompt_tokens"] == 12
    plain_ev, stream_ev = sorted(tap.events(), key=lambda e: e["output_tokens"])  # partitions: any order
    assert (stream_ev["input_tokens"], stream_ev["output_tokens"], stream_ev["finish_reason"]) == (900, 3, "stop")
    # Through the proxy's extra hop the first chunk can reach the middleware
    # late while the last does not (a CI run saw ttft 0.147 s and e2e 0.246 s),
    # so the engine's own 0.1 s between them is not a bound here. What is: the
    # engine ends 0.2 s after the start at the earliest, and a proxy that
    # buffered the stream would put the first token at the end (a gap near 0).
    # Above: the client's clock around the whole call.
    assert 0.1 <= stream_ev["ttft_s"] and 0.2 <= stream_ev["e2e_s"] <= streamed_took
    assert stream_ev["e2e_s"] - stream_ev["ttft_s"] >= 0.05, stream_ev
    # The proxied JSON answer (forwarded in the upstream's reads) is a whole answer: not streamed.
    assert (plain_ev["input_tokens"], plain_ev["output_tokens"]) == (12, 2)
    assert (plain_ev["streamed"], plain_ev["ttft_s"]) == (False, None) and plain_ev["e2e_s"] >= 0.1
    assert "streamed" not in stream_ev
    assert app.stats() == {"recorded": 2, "errors": 0, "skipped": {}}
    meter.close()


def test_events_reach_the_real_broker(kafka_bootstrap):
    from phasemeter.stream_jobs.derive import validate

    tap = Tapped(kafka_bootstrap, gateway="asgi-test")
    meter = tap.meter
    state: dict = {}
    with serve(PhasemeterMiddleware(make_app(state), meter, request_id=lambda ex: f"rid-{uuid.uuid4().hex}")) \
            as url, httpx.Client(timeout=10) as client:
        t_start = time.monotonic()
        plain = client.post(f"{url}/v1/chat/completions", json={**REQUEST, "stream": False})
        plain_took = time.monotonic() - t_start
        assert plain.json()["usage"]["completion_tokens"] == 2
        state["client_saw_first"].set()
        with client.stream("POST", f"{url}/v1/chat/completions", json=REQUEST) as resp:
            assert b"[DONE]" in resp.read()
    assert meter.flush(15)
    meter.close()
    assert meter.stats().sent == 2
    records = records_in(kafka_bootstrap, tap.topic, at_least=1)  # to the end offsets: all of them
    assert len(records) >= 1
    events = sorted((e for r in records for e in unwrap(r.value)), key=lambda e: e["output_tokens"])
    assert len(events) == 2 and len({e["request_id"] for e in events}) == 2
    assert all(r.key is None for r in records)  # envelopes (the default) are unkeyed
    plain_ev, stream_ev = events
    assert (plain_ev["input_tokens"], plain_ev["output_tokens"], plain_ev["gateway"]) == (12, 2, "asgi-test")
    # A whole JSON answer: no first token (phases null once stored), its end and counts kept.
    assert (plain_ev["schema_version"], plain_ev["streamed"], plain_ev["ttft_s"]) == (2, False, None)
    assert 0.1 <= plain_ev["e2e_s"] <= plain_took
    assert (stream_ev["input_tokens"], stream_ev["output_tokens"]) == (900, 3)
    assert len(events) == 2
    for ev in events:
        assert isinstance(validate(ev), dict)  # what the worker will accept
