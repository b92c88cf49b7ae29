"""stream_jobs/batching.py: batches by messages, bytes and the oldest record's
wait, with intake going on while a batch is processed. Driven through a real
Faust agent's test context (Faust's in-memory channel, no broker)."""

from __future__ import annotations

import asyncio
import time

import faust
import pytest

from phasemeter.stream_jobs.batching import gather


def run(values, max_messages=1000, max_bytes=10**9, linger_s=0.3, body_s=0.0, gaps=None, settle_s=None):
    """Put `values` (sleeping gaps[i] before value i), let the agent batch them;
    -> [(start time, end time, [values])] relative to the first put."""
    app = faust.App(f"t-{time.monotonic_ns()}", broker="kafka://127.0.0.1:1", store="memory://",
                    web_enabled=False)
    topic = app.topic("x", key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")
    got = []

    @app.agent(topic)
    async def agent(stream):
        async for batch in gather(stream, max_messages, max_bytes, linger_s):
            began = time.monotonic()
            await asyncio.sleep(body_s(len(got)) if callable(body_s) else body_s)
            got.append((began, time.monotonic(), [e.value for e in batch]))

    async def main():
        async with agent.test_context() as ctx:
            t0 = time.monotonic()
            for i, v in enumerate(values):
                if gaps and gaps[i]:
                    await asyncio.sleep(gaps[i])
                await ctx.put(v)
            await asyncio.sleep(settle_s if settle_s is not None else linger_s * 2 + 0.3)
            return [(b - t0, e - t0, vs) for b, e, vs in got]

    return asyncio.run(main())


def values(n, size=4):
    return [b"%0*d" % (size, i) for i in range(n)]


def test_a_batch_closes_at_max_messages_and_the_rest_after_the_linger():
    out = run(values(7), max_messages=3, linger_s=0.3)
    assert [vs for _, _, vs in out] == [values(7)[0:3], values(7)[3:6], values(7)[6:]]
    assert out[0][0] < 0.25 and out[1][0] < 0.25  # full: no wait
    assert out[2][0] >= 0.29  # the odd one waited its linger


def test_a_batch_closes_at_the_message_that_crosses_max_bytes():
    vs = values(7, size=400)
    out = run(vs, max_bytes=1000, linger_s=0.3)
    assert [len(b) for _, _, b in out] == [3, 3, 1]
    assert [v for _, _, b in out for v in b] == vs


def test_the_linger_counts_from_the_oldest_arrival_not_the_newest():
    # The stream is idle for 0.3 s first: a timer started with the loop
    # (Faust's take_events) would cut the batch 0.1 s after the first put.
    out = run(values(3), linger_s=0.4, gaps=[0.3, 0.1, 0.1])
    ((began, _, vs),) = out
    assert vs == values(3)
    assert 0.69 <= began < 0.95  # 0.4 after the first put (0.3), not after the last (0.5)


def test_records_arriving_during_a_batch_form_the_next_one_and_it_goes_at_once():
    # The first batch takes 0.6 s; meanwhile 5 more records arrive. They were
    # waiting longer than the linger by then, so the next batch starts as
    # soon as the first ends.
    out = run(values(6), linger_s=0.2, body_s=lambda i: 0.6 if i == 0 else 0.0,
              gaps=[0, 0.3, 0, 0, 0, 0], settle_s=1.2)
    assert [vs for _, _, vs in out] == [values(6)[:1], values(6)[1:]]
    first_end, second_start = out[0][1], out[1][0]
    assert second_start - first_end < 0.1


def test_nothing_is_lost_or_repeated_under_backpressure():
    # Bounds far smaller than the input, a slow body: the stream must wait
    # (both batches full), never drop.
    vs = values(500)
    out = run(vs, max_messages=40, linger_s=0.05, body_s=0.01, settle_s=2.0)
    assert [v for _, _, b in out for v in b] == vs
    assert max(len(b) for _, _, b in out) <= 40


@pytest.mark.parametrize("linger_s", [0.05, 0.3])
def test_a_quiet_stream_yields_nothing(linger_s):
    assert run([], linger_s=linger_s, settle_s=0.4) == []
