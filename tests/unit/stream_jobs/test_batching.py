"""stream_jobs/batching.py: batches by messages, bytes and the oldest record's
wait, with intake going on while a batch is processed. Driven through a real
Faust agent's test context (Faust's in-memory channel, no broker)."""

from __future__ import annotations

import asyncio
import time

import faust
import pytest

from phasemeter.stream_jobs.batching import gather


def run(values, max_messages=1000, max_bytes=10**9, linger_s=0.3, body_s=0.0, gaps=None, expect=None,
        watch_s=None):
    """Put `values` (sleeping gaps[i] before value i), let the agent batch them,
    and wait (a 30 s deadline) until `expect` values (default: all) came out
    in batches; or, with `watch_s`, watch that long (to see that nothing comes).
    -> ([(start time, end time, [values])], [time each put began]), relative
    to the start. A put begins before its record arrives, so `linger_s`
    after a put's time is a lower bound for a cut that waits on it."""
    app = faust.App(f"t-{time.monotonic_ns()}", broker="kafka://127.0.0.1:1", store="memory://",
                    web_enabled=False)
    topic = app.topic("x", key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")
    got = []
    expect = len(values) if expect is None else expect

    @app.agent(topic)
    async def agent(stream):
        async for batch in gather(stream, max_messages, max_bytes, linger_s):
            began = time.monotonic()
            await asyncio.sleep(body_s(len(got)) if callable(body_s) else body_s)
            got.append((began, time.monotonic(), [e.value for e in batch]))

    async def main():
        async with agent.test_context() as ctx:
            t0, puts = time.monotonic(), []
            for i, v in enumerate(values):
                if gaps and gaps[i]:
                    await asyncio.sleep(gaps[i])
                puts.append(time.monotonic() - t0)
                await ctx.put(v)
            if watch_s is not None:
                await asyncio.sleep(watch_s)
            deadline = time.monotonic() + 30
            while sum(len(vs) for _, _, vs in got) < expect:
                assert time.monotonic() < deadline, f"{expect} values not batched in 30 s: {got}"
                await asyncio.sleep(0.01)
            return [(b - t0, e - t0, vs) for b, e, vs in got], puts

    return asyncio.run(main())


def values(n, size=4):
    return [b"%0*d" % (size, i) for i in range(n)]


def test_a_full_batch_goes_without_waiting_for_the_linger():
    # A linger no test run reaches: the two full batches come out while the
    # seventh value still waits for it (the run stops after six values).
    out, _ = run(values(7), max_messages=3, linger_s=3600, expect=6)
    assert [vs for _, _, vs in out] == [values(7)[0:3], values(7)[3:6]]


def test_the_rest_goes_after_the_linger():
    out, puts = run(values(7), max_messages=3, linger_s=0.3)
    assert [vs for _, _, vs in out] == [values(7)[0:3], values(7)[3:6], values(7)[6:]]
    assert out[2][0] >= puts[6] + 0.3  # the odd one waited its linger


def test_a_batch_closes_at_the_message_that_crosses_max_bytes():
    vs = values(7, size=400)
    out, _ = run(vs, max_bytes=1000, linger_s=0.3)
    assert [len(b) for _, _, b in out] == [3, 3, 1]
    assert [v for _, _, b in out for v in b] == vs


def test_the_linger_counts_from_the_oldest_arrival_not_the_newest():
    # The stream is idle for 0.3 s first: a timer started with the loop
    # (Faust's take_events) would cut the batch before the linger of the first
    # put is over. Then a record every 0.1 s for 1.9 s: a linger counted from
    # the newest arrival would never expire before the last put, one counted
    # from the oldest cuts a first batch while the puts go on (the event loop
    # runs timers in deadline order, so this holds under any load).
    out, puts = run(values(20), linger_s=0.4, gaps=[0.3] + [0.1] * 19)
    assert len(out) >= 2 and [v for _, _, b in out for v in b] == values(20)
    began, _, first = out[0]
    assert puts[0] + 0.4 <= began < puts[-1]
    assert first == values(20)[:len(first)]


def test_records_arriving_during_a_batch_form_the_next_one_and_it_goes_at_once():
    # The first record is cut alone after its linger (0.5 s) and takes 1 s;
    # meanwhile 5 more records arrive (0.7 s after it). Their linger runs
    # out while the first batch is still busy, so the next batch starts as
    # it ends: one that waited a linger of its own after the first ended
    # would start at least linger_s later.
    linger_s = 0.5
    out, puts = run(values(6), linger_s=linger_s, body_s=lambda i: 1.0 if i == 0 else 0.0,
                    gaps=[0, 0.7, 0, 0, 0, 0])
    assert [vs for _, _, vs in out] == [values(6)[:1], values(6)[1:]]
    first_end, second_start = out[0][1], out[1][0]
    assert puts[5] < first_end <= second_start < first_end + linger_s


def test_nothing_is_lost_or_repeated_under_backpressure():
    # Bounds far smaller than the input, a slow body: the stream must wait
    # (both batches full), never drop.
    vs = values(500)
    out, _ = run(vs, max_messages=40, linger_s=0.05, body_s=0.01)
    assert [v for _, _, b in out for v in b] == vs
    assert max(len(b) for _, _, b in out) <= 40


@pytest.mark.parametrize("linger_s", [0.05, 0.3])
def test_a_quiet_stream_yields_nothing(linger_s):
    # Nothing can be waited for here: the run watches several lingers long.
    assert run([], linger_s=linger_s, watch_s=linger_s * 2 + 0.3) == ([], [])
