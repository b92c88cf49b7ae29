"""join_agent: the expiry timer hands over like a batch.

The timer publishes abandoned generations and orphans, then writes the table
(entry marked done) to the changelog. A stop or a revoke that cuts it between
the two leaves the new owner an entry it expires again: the same generation
published twice. The app here is a stand-in that records what reaches
"Kafka" and when; join.py's logic runs for real."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest
from faust.types import TP

from phasemeter.stream_jobs import join, join_agent
from phasemeter.stream_jobs.buckets import Bucketer, parse_edges
from phasemeter.stream_jobs.phase_events import validate_phase

ACK_S = 0.3  # a broker round trip: long enough for a revoke to come in between


class App:
    """What join_agent touches of a Faust app: topics, the table, the
    producer, the assignment and the readiness flags. `acked` lists every
    record the "broker" acknowledged, in order."""

    def __init__(self):
        self.acked: list[tuple[str, bytes | None]] = []
        self.agents, self.timers = {}, {}
        self.unassigned = self.in_recovery = self.rebalancing = False
        done = asyncio.Event()
        done.set()
        self.tables = SimpleNamespace(recovery=SimpleNamespace(completed=done))
        self.producer = self
        self.assignor = SimpleNamespace(assigned_actives=lambda: {TP("phases", 0)})

    def topic(self, name, **_):
        return SimpleNamespace(get_topic_name=lambda: name)

    def Table(self, name, **_):  # noqa: N802 -- Faust's name
        return SimpleNamespace(data={}, changelog_topic=self.topic(name + "-changelog"))

    def agent(self, _topic, name):
        return lambda fn: self.agents.setdefault(name, fn)

    def timer(self, _seconds, name):
        return lambda fn: self.timers.setdefault(name, fn)

    async def send(self, topic, key, value, partition, timestamp, headers):  # noqa: ARG002
        batch = self.create_batch()
        batch.append(key=key, value=value, timestamp=timestamp)
        return await self.send_batch(batch, topic, partition=partition)

    # aiokafka's batch API, which publish.send_batched uses for the changelog
    def _ensure_producer(self):
        return self

    def create_batch(self):
        return Batch()

    async def send_batch(self, batch, topic, *, partition):  # noqa: ARG002
        async def ack():
            await asyncio.sleep(ACK_S)
            self.acked.extend((topic, key) for key, _ in batch.records)
        return asyncio.ensure_future(ack())


class Batch:
    def __init__(self):
        self.records = []

    def append(self, *, key, value, timestamp):  # noqa: ARG002
        self.records.append((key, value))
        return True  # aiokafka: metadata, or None when full


def _installed():
    app = App()
    settings = SimpleNamespace(topic_partitions=1, phase_topic_name="phases", joined_topic_name="joined",
                               stop_grace_s=5.0, abandon_after_s=60.0, orphan_grace_s=60.0,
                               expiry_tick_s=1.0)
    state = join_agent.install(app, settings, Bucketer(parse_edges("default")), offsets=None, crash=None)
    # One generation started an hour ago and never ended, on a partition
    # whose newest record is from now: due as abandoned.
    now = time.time()
    state.clocks.observe(0, now, now)
    start = validate_phase({"schema_version": 2, "kind": "start", "request_id": "r1", "model": "m",
                            "t0": now - 3600, "input_tokens": 100}, now)
    entry, _, _ = join.apply(None, "r1", start, 0, now - 3600)
    state.table.data[b"r1"] = entry
    return app, state, app.timers["phasemeter.expire"]


def test_a_revoke_during_the_tick_waits_for_its_publish_and_its_write():
    async def main():
        app, state, tick = _installed()
        timer = asyncio.ensure_future(tick())
        await asyncio.sleep(ACK_S / 3)  # the abandoned generation is on its way to Kafka
        assert app.acked == []
        await state.handoff.settle()  # what the revoke callback does before partitions move
        after_settle = list(app.acked)
        await timer
        return after_settle, state.table.data[b"r1"]

    after_settle, entry = asyncio.run(main())
    assert after_settle == [("joined", None), ("phasemeter-join-changelog", b"r1")]
    assert entry["how"] == "abandoned"


def test_a_stop_during_the_tick_lets_it_write_the_table():
    async def main():
        app, state, tick = _installed()
        timer = asyncio.ensure_future(tick())
        await asyncio.sleep(ACK_S / 3)
        timer.cancel()  # Faust stops its timers by cancelling them
        with pytest.raises(asyncio.CancelledError):
            await timer
        return app.acked

    assert asyncio.run(main()) == [("joined", None), ("phasemeter-join-changelog", b"r1")]


def test_a_tick_that_waited_through_a_revoke_expires_nothing():
    async def main():
        app, state, tick = _installed()
        async with state.lock:  # a batch in hand
            timer = asyncio.ensure_future(tick())
            await asyncio.sleep(0.05)
            app.rebalancing = True  # the revoke came while the tick waited for the lock
        await timer
        return app.acked, state.table.data[b"r1"]

    acked, entry = asyncio.run(main())
    assert acked == []
    assert "done" not in entry
