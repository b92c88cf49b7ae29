"""phasemeter.integrations.litellm with REAL litellm.completion / acompletion /
Router calls (provider `openai/`, api_base = the local scripted server).

LiteLLM stamps its times with the wall clock (datetime.now()), so the server's
monotonic stamps are converted with `LLMServer.wall()` to hold them from below
(LiteLLM cannot see a chunk before it is written), and the caller stamps the
same clock (`now()`) to hold them from above: LiteLLM's start is not before
the call, its first chunk not after the caller got one, its end not after
the event reached the collector. Exact both ways, whatever the load.
Success callbacks of sync calls run in LiteLLM's logging thread: the tests
wait on the collector with a deadline, never a bare sleep.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import time

# Without it, importing litellm fetches its model cost map from GitHub (three
# tries with backoff on a machine without internet): use the bundled copy.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest  # noqa: E402
from llm_server import LLMServer, MemoryProducer, Script, frozen_heap  # noqa: E402

litellm = pm_litellm = None  # imported as the module's first test starts: see _imports
from phasemeter.producers import Meter  # noqa: E402
from phasemeter.stream_jobs.derive import validate  # noqa: E402

MSG = [{"role": "user", "content": "hi"}]
USAGE = {"stream_options": {"include_usage": True}}


@pytest.fixture(scope="module", autouse=True)
def _imports():
    """LiteLLM is imported when this module's first test starts, not as a test
    process collects the file: every process collects every file, and the
    import took ~6 s of CPU (pydantic builds some 2,500 models) whether or not
    the process ran a test of it."""
    global litellm, pm_litellm
    import litellm
    from phasemeter.integrations import litellm as pm_litellm


@pytest.fixture(scope="module", autouse=True)
def _no_full_collections_mid_stream(_imports):
    with frozen_heap():
        yield


def unregister(logger) -> None:
    litellm.logging_callback_manager.remove_callback_from_all_lists(logger)


@pytest.fixture(scope="module")
def server():
    with LLMServer() as srv:
        # Warm-up (LiteLLM's first call, and first stream, cost 0.1-0.5 s), waiting for its callback
        # so that it cannot land in the first test's collector.
        sink = MemoryProducer()
        warm = pm_litellm.PhasemeterLogger(Meter("memory:0", producer_factory=sink))
        litellm.callbacks = [warm]
        litellm.completion(model="openai/warm", api_base=srv.base_url, api_key="k", messages=MSG)
        list(litellm.completion(model="openai/warm", api_base=srv.base_url, api_key="k", messages=MSG, stream=True))
        sink.wait(2)
        unregister(warm)
        warm.meter.close(1)
        yield srv


@pytest.fixture
def sink():
    return MemoryProducer()


@pytest.fixture
def logged(sink):
    """Make a PhasemeterLogger, register it as LiteLLM users do, unregister after."""
    made = []

    def make(**opts) -> "pm_litellm.PhasemeterLogger":
        for old in made:  # LiteLLM copies callbacks into more lists: take old ones out of all
            unregister(old)
        logger = pm_litellm.PhasemeterLogger(Meter("memory:0", producer_factory=sink), **opts)
        made.append(logger)
        litellm.callbacks = [logger]
        return logger

    yield make
    for logger in made:
        unregister(logger)
        logger.meter.close(1)


async def until(sink, n: int, timeout_s: float = 5.0) -> None:
    """Wait inside the loop: LiteLLM runs async callbacks as tasks on it, and
    asyncio.run() cancels those still pending when the coroutine returns."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while len(sink.events) < n and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.005)


def call(server, **kwargs):
    return dict(model="openai/m1", api_base=server.base_url, api_key="k", messages=MSG, num_retries=0, **kwargs)


def events(sink, n: int) -> list[dict]:
    got = sink.wait(n)
    assert len(got) == n, got  # exactly n: a duplicate fails here
    for ev in got:
        assert isinstance(validate(ev), dict), ev  # what the worker would store
    return got


def counted(logger, timeout_s: float = 5.0, **expected) -> bool:
    """The logger's counters reach `expected`: a sync call's callback runs in
    LiteLLM's logging thread and counts just after handing the event over."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(logger.stats[k] == v for k, v in expected.items()):
            return True
        time.sleep(0.005)
    raise AssertionError(f"{logger.stats} never reached {expected}")


def now() -> float:
    """LiteLLM's clock, read and converted as the logger converts its stamps."""
    return datetime.datetime.now().timestamp()


def between(ev: dict, key: str, sent: float, server, called: float, seen: float) -> None:
    """ev[key], s after LiteLLM's t0, stamps something the server sent at
    `sent` (monotonic): not before it was sent, and no longer after t0 than
    the caller, who called at `called` (now()), saw it at `seen` (now())."""
    wall = server.wall(sent)
    assert wall <= ev["t0"] + ev[key], (ev["t0"] + ev[key] - wall)
    assert ev[key] <= seen - called, (ev[key], seen - called)


def drain(stream) -> tuple[list, float]:
    """The chunks, and when (now()) the caller got the first of any kind:
    LiteLLM's completion_start_time is its own first chunk, whatever it holds."""
    got, first = [], None
    for chunk in stream:
        if first is None:
            first = now()
        got.append(chunk)
    assert first is not None
    return got, first


# -- streaming ---------------------------------------------------------------
def test_sync_stream_with_usage(server, logged, sink):
    logger = logged()
    script = Script(ttft_s=0.04, gap_s=0.01, chunks=4, role_chunk=False, prompt_tokens=30, cached_tokens=8)
    server.push(script)
    called = now()
    chunks, seen = drain(litellm.completion(**call(server, stream=True, **USAGE)))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "t0 t1 t2 t3 "
    served = server.log[-1]
    (ev,) = events(sink, 1)
    arrived = now()  # LiteLLM stamped the end before its callback handed the event over
    assert (ev["model"], ev["status"], ev["finish_reason"]) == ("m1", "ok", "stop")
    assert (ev["input_tokens"], ev["output_tokens"], ev["cached_input_tokens"]) == (30, 4, 8)
    assert ev["t0"] <= server.wall(served.t_request)
    between(ev, "ttft_s", served.t_chunks[0], server, called, seen)
    # LiteLLM stamps the end when its logging handler runs, behind the last
    # chunk by its own lag (10-95 ms here, once 0.67 s): held by the event's arrival.
    between(ev, "e2e_s", served.t_chunks[-1], server, called, arrived)
    assert script.ttft_s <= ev["ttft_s"] < ev["e2e_s"]
    assert counted(logger, recorded=1, estimated_usage=0)


def test_litellm_stamps_its_first_chunk_even_a_role_only_one(server, logged, sink):
    # A known limit, kept visible: LiteLLM's completion_start_time is its first
    # chunk, so a server that opens with a role-only chunk shortens the TTFT.
    logged()
    server.push(Script(ttft_s=0.06, gap_s=0.01, chunks=2, role_chunk=True))
    called = now()
    _, seen = drain(litellm.completion(**call(server, stream=True, **USAGE)))
    served = server.log[-1]
    (ev,) = events(sink, 1)
    between(ev, "ttft_s", served.t_opened, server, called, seen)
    assert ev["t0"] + ev["ttft_s"] < server.wall(served.t_chunks[0])


def test_stream_without_usage_is_litellms_estimate_and_counted(server, logged, sink):
    logger = logged()
    server.push(Script(chunks=3))
    list(litellm.completion(**call(server, stream=True)))
    assert "stream_options" not in server.log[-1].body  # LiteLLM asks only OpenAI's own API for usage
    (ev,) = events(sink, 1)
    assert ev["output_tokens"] > 0 and counted(logger, estimated_usage=1, recorded=1)
    assert ev["output_tokens_estimated"] is True


# -- whole responses, async, failures ------------------------------------------
def test_sync_whole_response(server, logged, sink):
    logged(model_from="response")
    script = Script(ttft_s=0.03, gap_s=0.01, chunks=3, model="served-name", cached_tokens=4)
    server.push(script)
    called = now()
    litellm.completion(**call(server))
    served = server.log[-1]
    (ev,) = events(sink, 1)
    arrived = now()
    assert (ev["model"], ev["input_tokens"], ev["output_tokens"], ev["cached_input_tokens"]) == ("served-name", 11, 3, 4)
    # LiteLLM stamps a whole response's first token at its end; that is no first
    # token the caller saw, so the event says not streamed, with no ttft_s
    assert (ev["schema_version"], ev["streamed"], ev["ttft_s"]) == (2, False, None)
    assert ev["t0"] <= server.wall(served.t_request)
    assert script.ttft_s + 2 * script.gap_s <= ev["e2e_s"] <= arrived - called


def test_async_stream_and_whole_response_use_the_async_hooks(server, logged, sink):
    logged()
    script = Script(ttft_s=0.04, gap_s=0.01, chunks=3, role_chunk=False)

    async def run():
        server.push(script)
        called, seen = now(), None
        async for _ in await litellm.acompletion(**call(server, stream=True, **USAGE)):
            if seen is None:
                seen = now()
        served = server.log[-1]
        await litellm.acompletion(**call(server))
        await until(sink, 2)
        return served, called, seen

    served, called, seen = asyncio.run(run())
    streamed, whole = sorted(events(sink, 2), key=lambda e: e["ttft_s"] is None)
    assert (streamed["output_tokens"], whole["output_tokens"]) == (3, 3)
    between(streamed, "ttft_s", served.t_chunks[0], server, called, seen)
    assert "streamed" not in streamed and (whole["ttft_s"], whole["streamed"]) == (None, False)


def test_failures_sync_and_async(server, logged, sink):
    logger = logged()  # no count_tokens: a failure has no usage, so no input size
    server.push(Script(status=500))
    with pytest.raises(litellm.exceptions.InternalServerError):
        litellm.completion(**call(server))
    assert counted(logger, skipped_no_usage=1, recorded=0)

    logger = logged(count_tokens=lambda kwargs: len(kwargs["messages"]) * 10)
    server.push(Script(status=500, ttft_s=0.02), Script(status=503))
    with pytest.raises(litellm.exceptions.InternalServerError):
        litellm.completion(**call(server))
    served = server.log[-1]

    async def fail():
        with pytest.raises(litellm.exceptions.ServiceUnavailableError):
            await litellm.acompletion(**call(server))
        await until(sink, 2)
    asyncio.run(fail())
    first, second = events(sink, 2)
    for ev in (first, second):
        assert (ev["status"], ev["input_tokens"], ev["output_tokens"], ev["ttft_s"]) == ("error", 10, 0, None)
    assert first["e2e_s"] >= 0.02 and first["t0"] <= server.wall(served.t_request)
    assert counted(logger, estimated_input_tokens=2)


def test_a_broken_hook_never_breaks_the_call(server, logged, sink):
    def explode(kwargs):
        raise RuntimeError("count_tokens bug")
    logger = logged(count_tokens=explode)
    server.push(Script(status=500))
    with pytest.raises(litellm.exceptions.InternalServerError):  # the call's own error, not ours
        litellm.completion(**call(server))
    assert counted(logger, internal_errors=1)


# -- routing and the proxy entry point -------------------------------------------
def test_router_labels_the_deployment_its_group_and_its_id(server, logged, sink):
    router = litellm.Router(model_list=[{
        "model_name": "public", "model_info": {"id": "replica-a"},
        "litellm_params": {"model": "openai/m1", "api_base": server.base_url, "api_key": "k"}}])
    by_deployment, by_group = logged(), logged(model_from="model_group")
    litellm.callbacks = [by_deployment, by_group]  # two Meters: LiteLLM keeps both
    server.push(Script(chunks=2))
    router.completion(model="public", messages=MSG)
    got = {(e["model"], e["replica"]) for e in events(sink, 2)}
    assert got == {("openai/m1", "replica-a"), ("public", "replica-a")}


def test_a_fallback_is_reported_under_the_deployment_that_failed_and_the_one_that_answered(server, logged, sink):
    router = litellm.Router(model_list=[
        {"model_name": "a", "model_info": {"id": "dep-a"},
         "litellm_params": {"model": "openai/ma", "api_base": server.base_url, "api_key": "k"}},
        {"model_name": "b", "model_info": {"id": "dep-b"},
         "litellm_params": {"model": "openai/mb", "api_base": server.base_url, "api_key": "k"}}],
        fallbacks=[{"a": ["b"]}], num_retries=0)
    logged(count_tokens=lambda kwargs: 3)
    server.push(Script(status=500))
    router.completion(model="a", messages=MSG)
    got = sorted((e["status"], e["model"], e["replica"]) for e in events(sink, 2))
    assert got == [("error", "openai/ma", "dep-a"), ("ok", "openai/mb", "dep-b")]


def test_the_proxy_config_path_resolves_to_one_logger_built_from_the_environment(monkeypatch):
    from litellm.proxy.types_utils.utils import get_instance_fn

    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setenv("PHASEMETER_TOPIC", "proxy-topic")
    monkeypatch.setattr(pm_litellm, "_proxy_instance", None)
    logger = get_instance_fn("phasemeter.integrations.litellm.proxy_handler_instance")
    try:
        assert isinstance(logger, pm_litellm.PhasemeterLogger) and pm_litellm.proxy_handler_instance is logger
        assert logger.meter.stats().enqueued == 0  # nothing sent, nothing connected yet
    finally:
        logger.meter.close(0)
    with pytest.raises(AttributeError):
        pm_litellm.no_such_name


def test_model_from_is_checked():
    with pytest.raises(ValueError):
        pm_litellm.PhasemeterLogger(Meter("memory:0", producer_factory=MemoryProducer()), model_from="alias")
