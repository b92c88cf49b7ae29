"""LogOffsets falls back on Faust's consumer when its own connection to
Kafka fails: no broker here (a port nothing listens on) and a stand-in for
Faust's consumer whose answers no broker could give, so the test sees which
path answered. The real broker's answers are
tests/integration/test_log_offsets.py's."""

from __future__ import annotations

import asyncio
import logging
import socket
from types import SimpleNamespace

from phasemeter.settings import Settings
from phasemeter.stream_jobs.log_offsets import LogOffsets


class FaustConsumerStandIn:
    """Only what the fallback calls, with answers a broker could not give
    (so the test sees which path answered)."""

    def __init__(self):
        self.calls = []

    async def highwaters(self, *tps):
        self.calls.append(("highwaters", tps))
        return {tp: 1000 + tp.partition for tp in tps}

    async def earliest_offsets(self, *tps):
        self.calls.append(("earliest_offsets", tps))
        return {tp: 500 + tp.partition for tp in tps}


def offsets_for(bootstrap: str) -> tuple[LogOffsets, FaustConsumerStandIn]:
    consumer = FaustConsumerStandIn()
    return LogOffsets(SimpleNamespace(consumer=consumer), Settings(kafka_session_timeout_s=10.0), bootstrap), consumer


def test_a_failed_connection_falls_back_on_fausts_consumer(caplog):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    offsets, faust_consumer = offsets_for(dead)
    try:
        with caplog.at_level(logging.WARNING, logger="phasemeter.worker"):
            ends = asyncio.run(offsets.ends([("t", 1), ("t", 0)]))
            starts = asyncio.run(offsets.starts([("t", 0)]))
    finally:
        offsets.close()
    assert ends == {("t", 0): 1000, ("t", 1): 1001}
    assert starts == {("t", 0): 500}
    assert [name for name, _ in faust_consumer.calls] == ["highwaters", "earliest_offsets"]
    assert "end_offsets of 2 partition(s) failed" in caplog.text


def test_a_worker_stopped_before_its_start_task_ran_does_not_crash_on_warm():
    """SIGTERM while a worker starts: the app stops, and closes the offsets
    client, before the ingest agent's start task warms it. That warm() then
    found the executor shut down and raised, and Faust's app crashed
    ("cannot schedule new futures after shutdown") instead of exiting 0."""
    offsets, faust_consumer = offsets_for("127.0.0.1:1")
    offsets.close()
    offsets.warm()  # nothing to connect for: the worker is stopping
    assert asyncio.run(offsets.ends([("t", 0)])) == {("t", 0): 1000}  # and a late ask falls back
    assert faust_consumer.calls
