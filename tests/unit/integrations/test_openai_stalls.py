"""The OpenAI wrapper's chunk hook: decode-stall fields of a streamed call,
through the real `openai` SDK against the local server (tests/llm_server.py),
which scripts one long gap (`Script.stalls`).

Bounds hold under any load: a gap is held from below by when the server was
due to write the later chunk (its sleep) minus when the caller already had
the earlier one (the wrapper saw it before handing it on), and from above
only by the generation itself (a gap lies between the first token and the end).
"""

from __future__ import annotations

import asyncio
import time

import openai
import pytest
from llm_server import MemoryProducer, Script
from test_openai_wrapper import (MSG, _no_full_collections_mid_stream, carries_output, client_for,  # noqa: F401
                                 events, pool, server)

from phasemeter.producers import Meter
from phasemeter.stream_jobs.contract import STALL_FIELDS

THRESHOLD = 0.1  # the Meter's stall_threshold_s here
STALL = 0.4      # the scripted long gap, before content chunk AT
AT = 5


@pytest.fixture
def sink():
    return MemoryProducer()


@pytest.fixture
def meter(sink):
    m = Meter("memory:0", producer_factory=sink, stall_threshold_s=THRESHOLD)
    yield m
    m.close(1)


def drain(stream) -> list[float]:
    """The caller's time.monotonic() as it got each output chunk."""
    out = []
    for chunk in stream:
        if carries_output(chunk):
            out.append(time.monotonic())
    return out


async def adrain(stream) -> list[float]:
    out = []
    async for chunk in stream:
        if carries_output(chunk):
            out.append(time.monotonic())
    return out


def check_stall(ev: dict, script: Script, served, got: list[float]) -> None:
    assert ev["chunks"] == script.chunks == len(got)  # content chunks only: not role, finish or usage
    assert ev["gap_threshold_s"] == THRESHOLD
    # The wrapper timed chunk AT no earlier than the server was due to write it
    # and chunk AT-1 no later than the caller had it: exact, whatever the load.
    floor = served.t_request + script.delay(AT) - got[AT - 1]
    assert floor > THRESHOLD  # the script made a real stall (else the test proves nothing)
    assert floor <= ev["max_gap_s"] <= ev["e2e_s"] - ev["ttft_s"]
    # Each gap i, exactly: at least from the server's stamp of chunk i to the
    # caller having chunk i-1, at most from the caller having chunk i to the
    # server's stamp of chunk i-1 (written after it). Load widens, never breaks.
    sent = served.t_chunks
    low = [sent[i] - got[i - 1] for i in range(1, len(got))]
    high = [got[i] - sent[i - 1] for i in range(1, len(got))]
    assert max(low) <= ev["max_gap_s"] <= max(high)
    over_low, over_high = sum(g > THRESHOLD for g in low), sum(g > THRESHOLD for g in high)
    assert 1 <= over_low <= ev["gaps_over"] <= over_high  # the scripted gap, plus any the load made


def test_a_scripted_stall_is_the_largest_gap_and_counts_over(server, meter, sink, client_for):
    script = Script(ttft_s=0.02, gap_s=0.005, chunks=8, stalls={AT: STALL})
    server.push(script)
    client, _ = client_for(meter)
    got = drain(client.chat.completions.create(model="m", messages=MSG, stream=True))
    (ev,) = events(sink, 1)
    assert ev["schema_version"] == 2 and "output_tokens_estimated" not in ev
    check_stall(ev, script, server.log[-1], got)


def test_async_client_times_its_chunks_the_same_way(server, meter, sink, client_for):
    script = Script(ttft_s=0.02, gap_s=0.005, chunks=7, stalls={AT: STALL})

    async def run():
        http = openai.DefaultAsyncHttpxClient()
        client, _ = client_for(meter, openai.AsyncOpenAI, http_client=http)
        server.push(script)
        try:
            return await adrain(await client.chat.completions.create(model="m", messages=MSG, stream=True))
        finally:
            await http.aclose()

    got = asyncio.run(run())
    (ev,) = events(sink, 1)
    check_stall(ev, script, server.log[-1], got)


def test_a_smooth_stream_counts_every_content_chunk_and_no_stall(server, meter, sink, client_for):
    # Tool-call deltas and legacy completion text are content chunks too; a
    # `choices: null` chunk, the role chunk and the usage chunk are not.
    scripts = [Script(chunks=4, tool_calls=True, null_choices=True, finish_reason="tool_calls"), Script(chunks=3)]
    server.push(*scripts)
    client, _ = client_for(meter)
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    calls = drain(client.chat.completions.create(model="m", messages=MSG, stream=True, tools=tools))
    text = drain(client.completions.create(model="m", prompt="x", stream=True))
    tool_ev, text_ev = events(sink, 2)
    assert (tool_ev["chunks"], text_ev["chunks"]) == (4, 3) == (len(calls), len(text))
    for ev in (tool_ev, text_ev):
        assert 0 <= ev["max_gap_s"] <= ev["e2e_s"] and ev["gap_threshold_s"] == THRESHOLD
        assert 0 <= ev["gaps_over"] < ev["chunks"]


def test_a_whole_response_or_a_stream_without_output_carries_no_chunk_fields(server, meter, sink, client_for):
    server.push(Script(chunks=4), Script(chunks=4, error_after=0), Script(chunks=1))
    client, _ = client_for(meter, count_tokens=lambda request: 3)
    client.chat.completions.create(model="m", messages=MSG)  # nothing timed per chunk
    with pytest.raises(openai.APIError):
        drain(client.chat.completions.create(model="m", messages=MSG, stream=True))  # fails before a token
    drain(client.chat.completions.create(model="m", messages=MSG, stream=True))  # one chunk: no gap
    whole, failed, single = events(sink, 3)
    for ev in (whole, failed):
        assert not set(STALL_FIELDS) & set(ev), ev  # absent, never 0
    assert failed["status"] == "error" and "streamed" not in failed
    assert (whole["schema_version"], whole["streamed"]) == (2, False)  # v2 for streamed: false alone
    assert (single["chunks"], single["gaps_over"]) == (1, 0) and "max_gap_s" not in single


def test_an_error_mid_stream_keeps_the_chunks_seen(server, meter, sink, client_for):
    server.push(Script(ttft_s=0.01, gap_s=0.005, chunks=6, error_after=3))
    client, _ = client_for(meter, count_tokens=lambda request: 3)
    with pytest.raises(openai.APIError):
        drain(client.chat.completions.create(model="m", messages=MSG, stream=True))
    (ev,) = events(sink, 1)
    assert (ev["status"], ev["chunks"], ev["output_tokens"]) == ("error", 3, 3)
