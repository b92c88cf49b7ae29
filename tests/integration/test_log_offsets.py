"""LogOffsets against a real broker: a log's start and end as Kafka has them,
also after records were deleted from its start, and Faust's consumer asked
instead when the worker's own connection fails."""

from __future__ import annotations

import asyncio
import logging
import socket
import uuid
from types import SimpleNamespace

import pytest
from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from phasemeter.settings import Settings
from phasemeter.stream_jobs.log_offsets import LogOffsets

pytestmark = pytest.mark.integration


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


@pytest.fixture
def topic(kafka_bootstrap):
    """Partition 0 holds offsets 2..6 (0 and 1 deleted), partition 1 holds 0..2, partition 2 is empty."""
    name = f"offsets-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    admin.create_topics([NewTopic(name, 3, 1)])
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    for partition, n in ((0, 7), (1, 3)):
        for i in range(n):
            producer.send(name, b"v%d" % i, partition=partition)
    producer.flush()
    producer.close()
    admin.delete_records({TopicPartition(name, 0): 2})
    admin.close()
    return name


def test_starts_and_ends_are_the_logs(kafka_bootstrap, topic):
    offsets, faust_consumer = offsets_for(kafka_bootstrap)
    try:
        async def ask():
            offsets.warm()
            tps = {(topic, 0), (topic, 1), (topic, 2)}
            return await offsets.starts(tps), await offsets.ends(tps), await offsets.ends([])
        starts, ends, none = asyncio.run(ask())
    finally:
        offsets.close()
    assert starts == {(topic, 0): 2, (topic, 1): 0, (topic, 2): 0}
    assert ends == {(topic, 0): 7, (topic, 1): 3, (topic, 2): 0}
    assert none == {}
    assert faust_consumer.calls == []  # answered over its own connection
    offsets.close()  # a second stop is harmless


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
