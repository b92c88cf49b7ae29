"""The ASGI middleware's chunk hook behind real uvicorn, a real Starlette
streaming app, a real streaming client (httpx) and the real broker, as
test_asgi_uvicorn.py.

The app sleeps STALL before one content event: the middleware stamps each
event as the app hands it over, so that gap is at least the sleep, whatever
the load (asyncio wakes no earlier than its clock resolution: SLACK). No
tight upper bound: a loaded machine only makes gaps longer."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import StreamingResponse
from starlette.routing import Route
from test_asgi_uvicorn import REQUEST, USAGE, Tapped, delta, serve, sse

from phasemeter.integrations.asgi import PhasemeterMiddleware
from phasemeter.stream_jobs.derive import validate

pytestmark = pytest.mark.integration

THRESHOLD = 0.1
STALL = 0.4
N, AT = 30, 12  # content events; the stall comes before content event AT
SLACK = 0.002


def app():
    async def chat(request):
        await request.json()

        async def tokens():
            yield sse({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
            for i in range(N):
                await asyncio.sleep(STALL if i == AT else 0.002)
                yield sse(delta(f"t{i} "))
            yield sse(delta("", finish="stop"))  # an empty content: not a chunk
            yield sse(USAGE)
            yield sse("[DONE]")
        return StreamingResponse(tokens(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def test_a_stall_in_a_uvicorn_stream_is_timed_over_content_events(kafka_bootstrap):
    tap = Tapped(kafka_bootstrap, stall_threshold_s=THRESHOLD)
    meter = tap.meter
    with serve(PhasemeterMiddleware(app(), meter)) as url, httpx.Client(timeout=10) as client:
        with client.stream("POST", f"{url}/v1/chat/completions", json=REQUEST) as resp:
            body = resp.read()
    assert body.count(b'"content": "t') == N
    (ev,) = tap.events()
    meter.close()
    assert ev["status"] == "ok" and ev["schema_version"] == 2
    assert ev["chunks"] == N  # content events only: not the role, finish or usage events
    assert ev["gap_threshold_s"] == THRESHOLD
    assert STALL - SLACK <= ev["max_gap_s"] <= ev["e2e_s"] - ev["ttft_s"]
    assert 1 <= ev["gaps_over"] <= N - 1
    assert isinstance(validate(ev), dict)  # what the worker stores


def test_the_stream_still_reaches_the_client_as_it_is_made(kafka_bootstrap):
    """Timing chunks holds nothing back: the client has the events before the
    stall while the app is still asleep in it."""
    tap = Tapped(kafka_bootstrap)
    meter = tap.meter
    with serve(PhasemeterMiddleware(app(), meter)) as url, httpx.Client(timeout=10) as client:
        with client.stream("POST", f"{url}/v1/chat/completions", json=REQUEST) as resp:
            got = b""
            for part in resp.iter_raw():
                got += part
                if f'"t{AT - 1} "'.encode() in got:
                    break  # before the stall ends: nothing was buffered behind it
    assert json.dumps(f"t{AT} ").encode() not in got
    meter.close()
