"""LogOffsets against a real broker: a log's start and end as Kafka has them,
also after records were deleted from its start (the fallback on Faust's
consumer when the connection fails is tests/unit/stream_jobs/test_log_offsets_fallback.py's)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from tests.unit.stream_jobs.test_log_offsets_fallback import offsets_for

pytestmark = pytest.mark.integration


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
