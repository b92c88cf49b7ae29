"""phasemeter.integrations.openai driven through the real `openai` SDK against
a local OpenAI-compatible server (tests/llm_server.py) whose timing is scripted.

The Meter is real; its producer is an in-memory collector (no broker here:
tests/integration/test_openai_e2e.py sends through Kafka). Measured times are
held to exact bounds on both sides, whatever the machine's load: from below to
the server's own stamps (the client cannot see a chunk before it is written),
from above to the caller's (`Watch`: the wrapper's t0 is taken inside create(),
not before the call, and it sees each chunk before handing it on).
"""

from __future__ import annotations

import asyncio
import gc
import time

import openai
import pytest
from llm_server import LLMServer, MemoryProducer, Script, frozen_heap

from phasemeter.integrations.openai import instrument
from phasemeter.producers import Meter
from phasemeter.stream_jobs.derive import validate

MSG = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module", autouse=True)
def _no_full_collections_mid_stream():
    with frozen_heap():
        yield


@pytest.fixture(scope="module")
def server():
    with LLMServer() as srv:
        yield srv


@pytest.fixture(scope="module")
def pool(server):
    """One warmed HTTP connection pool for every client of the module: a new
    SDK client then costs 0.4 ms instead of ~90 ms (its own TLS context), and
    no measured call pays for a first connection."""
    http = openai.DefaultHttpxClient()
    openai.OpenAI(base_url=server.base_url, api_key="k", http_client=http).chat.completions.create(
        model="m", messages=MSG)
    yield http
    http.close()


@pytest.fixture
def sink():
    return MemoryProducer()


@pytest.fixture
def meter(sink):
    m = Meter("memory:0", producer_factory=sink)
    yield m
    m.close(1)


@pytest.fixture
def client_for(server, pool):
    def make(meter, cls=openai.OpenAI, http_client=None, **opts):
        client = cls(base_url=server.base_url, api_key="k", max_retries=0, http_client=http_client or pool)
        return client, instrument(client, meter, **opts)
    return make


@pytest.fixture
def bare(server, pool):
    return openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0, http_client=pool)


def events(sink, n: int) -> list[dict]:
    got = sink.wait(n)
    assert len(got) == n, got  # exactly n: a duplicate fails here
    for ev in got:
        assert isinstance(validate(ev), dict), ev  # what the worker would store, not dead-letter
    return got


def carries_output(chunk) -> bool:
    """A content, tool-call or reasoning delta, or completion text: not the
    role-only opening chunk, a `choices: null` one, or the finish chunk."""
    for choice in chunk.choices or ():
        delta = getattr(choice, "delta", None)
        if delta is None:
            if choice.text:
                return True
        elif delta.content or delta.tool_calls or (delta.model_extra or {}).get("reasoning_content"):
            return True
    return False


class Watch:
    """The caller's side of one call, on the wrapper's clock (time.monotonic()).

    Make it just before create(): `call` is then no later than the wrapper's
    t0. `first`: when the caller's loop got the first output chunk (the
    wrapper saw it before yielding it); `end`: when the iteration ended, the
    exception reached the caller, or create() returned or raised. So
    `ttft_s <= first - call` and `e2e_s <= end - call` hold exactly, under
    any load; `first`/`end` are None until seen."""

    def __init__(self) -> None:
        self.first = self.end = None
        self.call = time.monotonic()

    def stamp(self, chunk) -> None:
        now = time.monotonic()
        if self.first is None and carries_output(chunk):
            self.first = now

    def done(self) -> None:
        self.end = time.monotonic()

    def drain(self, stream) -> list:
        got = []
        try:
            for chunk in stream:
                self.stamp(chunk)
                got.append(chunk)
        finally:
            self.done()
        return got

    async def adrain(self, stream) -> list:
        got = []
        try:
            async for chunk in stream:
                self.stamp(chunk)
                got.append(chunk)
        finally:
            self.done()
        return got

    @property
    def ttft_max(self) -> float:
        assert self.first is not None, "the caller never saw an output chunk"
        return self.first - self.call

    @property
    def e2e_max(self) -> float:
        assert self.end is not None
        return self.end - self.call


def within(measured: float, lower: float, upper: float) -> None:
    """lower: what the server really did; upper: what the caller saw. Both exact."""
    assert lower <= measured <= upper, (lower, measured, upper)


def dump(chunks) -> list[dict]:
    return [c.model_dump(exclude={"created"}) for c in chunks]


# -- streaming ---------------------------------------------------------------
def test_stream_times_the_first_content_chunk_and_hides_the_usage_it_asked_for(server, meter, sink, client_for, bare):
    script = Script(ttft_s=0.04, gap_s=0.01, chunks=4, model="served-7b", prompt_tokens=120, cached_tokens=64)
    server.push(script, script)
    plain = dump(bare.chat.completions.create(model="req", messages=MSG, stream=True))
    client, inst = client_for(meter)
    watch = Watch()
    stream = client.chat.completions.create(model="req", messages=MSG, stream=True)
    assert type(stream) is openai.Stream
    seen = dump(watch.drain(stream))
    served = server.log[-1]

    assert seen == plain  # same chunks as the bare SDK: the usage chunk stays hidden
    assert served.body["stream_options"] == {"include_usage": True} and served.usage_sent
    (ev,) = events(sink, 1)
    assert ev["model"] == "served-7b" and ev["status"] == "ok" and ev["finish_reason"] == "stop"
    assert (ev["input_tokens"], ev["output_tokens"], ev["cached_input_tokens"]) == (120, 4, 64)
    assert "output_tokens_estimated" not in ev  # the server's count, not an estimate
    assert ev["schema_version"] == 2 and ev["chunks"] == 4  # v2 for the chunk stats only (test_openai_stalls.py)
    # The role-only chunk goes out at once: 40 ms later is the first token.
    within(ev["ttft_s"], served.t_chunks[0] - served.t_request, watch.ttft_max)
    within(ev["e2e_s"], served.t_chunks[-1] - served.t_request, watch.e2e_max)
    assert ev["ttft_s"] < ev["e2e_s"]
    assert inst.stats["recorded"] == 1 and inst.stats["estimated_output_tokens"] == 0


def test_a_caller_who_asked_for_usage_still_sees_it(server, meter, sink, client_for):
    server.push(Script(chunks=2))
    client, _ = client_for(meter)
    chunks = list(client.chat.completions.create(model="m", messages=MSG, stream=True,
                                                 stream_options={"include_usage": True}))
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 2
    assert events(sink, 1)[0]["output_tokens"] == 2


def test_no_usage_from_the_server_counts_chunks_and_says_so(server, meter, sink, client_for):
    server.push(Script(chunks=5, usage="never"), Script(chunks=5, usage="never"))
    client, inst = client_for(meter)  # no count_tokens: input size unknown, not recorded
    list(client.chat.completions.create(model="m", messages=MSG, stream=True))
    assert inst.stats["skipped_no_usage"] == 1 and inst.stats["recorded"] == 0

    client, inst = client_for(meter, count_tokens=lambda request: 9)
    list(client.chat.completions.create(model="m", messages=MSG, stream=True))
    (ev,) = events(sink, 1)
    assert (ev["input_tokens"], ev["output_tokens"]) == (9, 5)  # 5 content chunks, not the finish chunk
    assert inst.stats["estimated_output_tokens"] == 1 and inst.stats["estimated_input_tokens"] == 1
    assert ev["output_tokens_estimated"] is True and ev["schema_version"] == 2  # the row says it was counted


def test_include_usage_false_leaves_the_request_alone(server, meter, sink, client_for):
    server.push(Script(chunks=3))
    client, inst = client_for(meter, include_usage=False, count_tokens=lambda request: 1)
    list(client.chat.completions.create(model="m", messages=MSG, stream=True))
    assert "stream_options" not in server.log[-1].body
    (ev,) = events(sink, 1)
    assert ev["output_tokens"] == 3 and inst.stats["estimated_output_tokens"] == 1
    assert ev["output_tokens_estimated"] is True


def test_error_mid_stream_reaches_the_caller_unchanged_and_is_recorded(server, meter, sink, client_for, bare):
    script = Script(ttft_s=0.03, gap_s=0.01, chunks=6, error_after=3)
    server.push(script, script)
    with pytest.raises(openai.APIError) as plain:
        list(bare.chat.completions.create(model="m", messages=MSG, stream=True))
    client, _ = client_for(meter, count_tokens=lambda request: 5)
    watch = Watch()
    with pytest.raises(openai.APIError) as wrapped:
        watch.drain(client.chat.completions.create(model="m", messages=MSG, stream=True))
    assert type(wrapped.value) is type(plain.value) and str(wrapped.value) == str(plain.value)
    served = server.log[-1]
    (ev,) = events(sink, 1)
    assert ev["status"] == "error" and ev["output_tokens"] == 3 and ev["finish_reason"] is None
    within(ev["ttft_s"], served.t_chunks[0] - served.t_request, watch.ttft_max)
    within(ev["e2e_s"], served.t_chunks[-1] - served.t_request, watch.e2e_max)  # ends at the error


def test_a_broken_connection_is_an_error(server, meter, sink, client_for):
    server.push(Script(chunks=5, drop_after=2))
    client, _ = client_for(meter, count_tokens=lambda request: 5)
    with pytest.raises(openai.APIConnectionError):
        list(client.chat.completions.create(model="m", messages=MSG, stream=True))
    (ev,) = events(sink, 1)
    assert ev["status"] == "error" and ev["output_tokens"] == 2


def test_stopping_early_is_a_cancel_whichever_way_the_caller_stops(server, meter, sink, client_for):
    client, inst = client_for(meter, count_tokens=lambda request: 5)
    server.push(*[Script(ttft_s=0.02, gap_s=0.01, chunks=20)] * 3)
    with client.chat.completions.create(model="m", messages=MSG, stream=True) as stream:
        for i, _ in enumerate(stream):  # role chunk, then two tokens
            if i == 2:
                break
    stream = client.chat.completions.create(model="m", messages=MSG, stream=True)
    next(stream), next(stream)
    del stream  # never closed: noticed when collected
    gc.collect()
    stream = client.chat.completions.create(model="m", messages=MSG, stream=True)
    stream.close()  # before reading anything
    closed, collected, unread = events(sink, 3)
    assert [e["status"] for e in (closed, collected, unread)] == ["cancelled"] * 3
    assert closed["output_tokens"] == 2 and closed["ttft_s"] is not None
    assert collected["output_tokens"] == 1 and collected["e2e_s"] == collected["ttft_s"]  # ends at its last chunk
    assert unread["ttft_s"] is None and unread["output_tokens"] == 0
    assert inst.stats["recorded"] == 3


def test_a_stream_dropped_before_reading_is_a_cancel(server, meter, sink, client_for):
    server.push(Script(chunks=3))
    client, _ = client_for(meter, count_tokens=lambda request: 5)
    client.chat.completions.create(model="m", messages=MSG, stream=True)
    gc.collect()
    (ev,) = events(sink, 1)
    assert ev["status"] == "cancelled" and ev["ttft_s"] is None and ev["e2e_s"] > 0  # up to the response headers


def test_stopping_after_the_finish_reason_is_ok(server, meter, sink, client_for):
    server.push(Script(chunks=3, finish_chunk=False))
    client, _ = client_for(meter, count_tokens=lambda request: 5)
    for chunk in client.chat.completions.create(model="m", messages=MSG, stream=True):
        if chunk.choices and chunk.choices[0].finish_reason:
            break  # the usage chunk behind it is never read
    gc.collect()
    (ev,) = events(sink, 1)
    assert ev["status"] == "ok" and ev["finish_reason"] == "stop" and ev["output_tokens"] == 3


def test_tool_call_chunks_are_output_and_null_choices_pass_through(server, meter, sink, client_for):
    script = Script(ttft_s=0.03, gap_s=0.01, chunks=3, tool_calls=True, null_choices=True, finish_reason="tool_calls")
    server.push(script)
    client, _ = client_for(meter)
    watch = Watch()
    chunks = watch.drain(client.chat.completions.create(model="m", messages=MSG, stream=True, tools=[
        {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]))
    assert chunks[1].choices is None  # the server's `choices: null` chunk, as the SDK gives it
    assert chunks[2].choices[0].delta.tool_calls[0].function.name == "lookup"
    served = server.log[-1]
    (ev,) = events(sink, 1)
    assert ev["finish_reason"] == "tool_calls" and ev["output_tokens"] == 3
    within(ev["ttft_s"], served.t_chunks[0] - served.t_request, watch.ttft_max)  # the first tool-call delta


def test_reasoning_deltas_end_the_prefill(server, meter, sink, client_for):
    script = Script(ttft_s=0.03, gap_s=0.01, chunks=2, reasoning=True)
    server.push(script)
    client, _ = client_for(meter)
    watch = Watch()
    watch.drain(client.chat.completions.create(model="m", messages=MSG, stream=True))
    served = server.log[-1]
    within(events(sink, 1)[0]["ttft_s"], served.t_chunks[0] - served.t_request, watch.ttft_max)


def test_legacy_completions_stream_and_whole(server, meter, sink, client_for):
    script = Script(ttft_s=0.03, gap_s=0.01, chunks=3, prompt_tokens=50)
    server.push(script, script)
    client, _ = client_for(meter)
    watch = Watch()
    chunks = watch.drain(client.completions.create(model="m", prompt="x", stream=True))
    text = "".join(c.choices[0].text for c in chunks)
    served = server.log[-1]
    whole = client.completions.create(model="m", prompt="x")
    assert type(whole) is openai.types.Completion and whole.choices[0].text == text
    streamed, single = events(sink, 2)
    assert (streamed["input_tokens"], streamed["output_tokens"]) == (50, 3)
    within(streamed["ttft_s"], served.t_chunks[0] - served.t_request, watch.ttft_max)
    # not streamed: no first token to time (docs/metrics.md), the event says so
    assert (single["ttft_s"], single["streamed"], single["output_tokens"]) == (None, False, 3)
    assert "streamed" not in streamed


# -- not streaming, failures, plumbing ---------------------------------------
def test_whole_response_is_the_sdk_object_and_is_recorded_as_not_streamed(server, meter, sink, client_for):
    """A whole response has no first token the caller saw: recording its
    end as one would count the decode as prefill (prefill_tps = input / e2e)."""
    script = Script(ttft_s=0.03, gap_s=0.01, chunks=4, model="served", cached_tokens=2)
    server.push(script)
    client, _ = client_for(meter)
    watch = Watch()
    resp = client.chat.completions.create(model="req", messages=MSG)
    watch.done()
    assert type(resp) is openai.types.chat.ChatCompletion and resp.model == "served"
    (ev,) = events(sink, 1)
    assert ev["model"] == "served" and ev["cached_input_tokens"] == 2
    assert (ev["schema_version"], ev["streamed"], ev["ttft_s"]) == (2, False, None)
    within(ev["e2e_s"], script.ttft_s + 3 * script.gap_s, watch.e2e_max)


def test_http_error_at_create_is_raised_unchanged_and_recorded(server, meter, sink, client_for):
    server.push(Script(status=500, ttft_s=0.02))
    client, _ = client_for(meter, count_tokens=lambda request: len(request["messages"]))
    watch = Watch()
    with pytest.raises(openai.InternalServerError):
        try:
            client.chat.completions.create(model="req", messages=MSG, stream=True)
        finally:
            watch.done()
    (ev,) = events(sink, 1)
    assert (ev["status"], ev["model"], ev["input_tokens"], ev["ttft_s"]) == ("error", "req", 1, None)
    within(ev["e2e_s"], 0.02, watch.e2e_max)


def test_raw_responses_pass_through_and_instrumenting_is_idempotent(server, meter, sink, client_for):
    client, inst = client_for(meter)
    assert instrument(client, meter) is inst
    raw = client.chat.completions.with_raw_response.create(model="m", messages=MSG)
    assert raw.parse().choices[0].message.content
    assert inst.stats["unmeasured"] == 1 and "stream_options" not in server.log[-1].body
    inst.uninstrument()
    client.chat.completions.create(model="m", messages=MSG)
    assert inst.stats["recorded"] == 0 and sink.events == []


def test_async_client_streams_whole_responses_and_cancels(server, meter, sink, client_for):
    script = Script(ttft_s=0.03, gap_s=0.01, chunks=3)

    async def run():
        http = openai.DefaultAsyncHttpxClient()  # an async pool lives in its loop: this one, warmed
        client, _ = client_for(meter, openai.AsyncOpenAI, http_client=http, count_tokens=lambda request: 5)
        await openai.AsyncOpenAI(base_url=server.base_url, api_key="k", http_client=http).chat.completions.create(
            model="m", messages=MSG)
        server.push(script)
        watch = Watch()
        stream = await client.chat.completions.create(model="m", messages=MSG, stream=True)
        assert type(stream) is openai.AsyncStream
        chunks = await watch.adrain(stream)
        served = server.log[-1]
        await client.chat.completions.create(model="m", messages=MSG)
        server.push(Script(ttft_s=0.02, gap_s=0.01, chunks=20))
        async with await client.chat.completions.create(model="m", messages=MSG, stream=True) as stream:
            async for _ in stream:
                break

        cancelled = []

        async def consume():
            cancelled.append(Watch())
            try:
                async for _ in await client.completions.create(model="m", prompt="x", stream=True):
                    pass
            finally:
                cancelled[0].done()  # the CancelledError got here: the wrapper has already ended the call
        server.push(Script(ttft_s=0.5))
        task = asyncio.create_task(consume())
        await asyncio.sleep(0.05)
        t_cancel = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        waited = t_cancel - server.log[-1].t_request
        await http.aclose()
        return chunks, served, waited, watch, cancelled[0]

    chunks, served, waited, watch, cancelled = asyncio.run(run())
    assert all(c.choices for c in chunks)  # the hidden usage chunk stayed hidden
    streamed, whole, closed, task = events(sink, 4)
    assert (streamed["status"], streamed["output_tokens"]) == ("ok", 3)
    within(streamed["ttft_s"], served.t_chunks[0] - served.t_request, watch.ttft_max)
    assert (whole["ttft_s"], whole["streamed"]) == (None, False)
    assert (closed["status"], task["status"]) == ("cancelled", "cancelled")
    assert task["ttft_s"] is None
    within(task["e2e_s"], waited, cancelled.e2e_max)


def test_instrument_refuses_what_is_not_an_openai_client(meter):
    with pytest.raises(TypeError):
        instrument(object(), meter)


def test_the_module_named_openai_imports_the_real_sdk():
    from phasemeter.integrations import openai as pm_openai

    assert pm_openai.openai is openai and openai.__name__ == "openai" and hasattr(openai, "OpenAI")
