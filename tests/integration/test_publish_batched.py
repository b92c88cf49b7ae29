"""publish.send_batched through a real aiokafka producer to the real broker:
every record arrives once, with its key, value (a tombstone stays None) and
partition, in the order given per partition, also when a partition's records
fill several batches; the futures resolve only once Kafka has them."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

import pytest
from aiokafka import AIOKafkaProducer
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic

from phasemeter.stream_jobs.publish import Publisher, send_batched

pytestmark = pytest.mark.integration


def read_all(bootstrap: str, topic: str, partitions: int, expected: int) -> dict[int, list]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000)
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    consumer.seek_to_beginning()
    got: dict[int, list] = {}
    for n, record in enumerate(consumer, 1):
        got.setdefault(record.partition, []).append((record.key, record.value))
        if n == expected:
            break
    consumer.close()
    return got


def test_every_record_once_in_order_per_partition(kafka_bootstrap):
    topic = f"batched-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    admin.create_topics([NewTopic(topic, 3, 1)])
    admin.close()
    # ~60 bytes a record against 4 kB batches: each partition's records fill many batches.
    records = [(b"key-%05d" % i, None if i % 97 == 0 else b'{"p": %d, "done": %d.5}' % (i % 3, i), i % 3)
               for i in range(3000)] + [(b"big", b"x" * 10_000, 1)]  # larger than a batch: one of its own

    async def send():
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, max_batch_size=4096, linger_ms=0)
        await producer.start()
        try:
            app = SimpleNamespace(producer=SimpleNamespace(_ensure_producer=lambda: producer))
            sent = await send_batched(app, topic, records)
            done = await asyncio.gather(*(future for future, _ in sent))
            assert sorted(i for _, held in sent for i in held) == list(range(len(records)))
            return len(sent), done
        finally:
            await producer.stop()

    n_batches, done = asyncio.run(send())
    assert n_batches > 3 * 10 and all(meta is not None for meta in done)
    got = read_all(kafka_bootstrap, topic, 3, len(records))
    for partition in range(3):
        assert got[partition] == [(k, v) for k, v, p in records if p == partition]
    assert asyncio.run(empty_send()) == []


async def empty_send():
    return await send_batched(SimpleNamespace(producer=SimpleNamespace(_ensure_producer=lambda: None)), "t", [])


def test_the_publisher_puts_a_keyed_record_where_a_send_of_its_key_goes(kafka_bootstrap):
    """Dead letters are keyed by their source topic and sent in batches: each
    lands on the partition aiokafka's own send gives that key."""
    topic = f"keyed-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    admin.create_topics([NewTopic(topic, 4, 1)])
    admin.close()
    keys = [b"gen", b"gen.joined", b"gen.otlp", b"other", b"x" * 40]
    messages = [(topic, keys[i % 5], b"%d" % i, None) for i in range(200)] + [(topic, None, b"p3", 3)]

    async def deliver():
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, linger_ms=0)
        await producer.start()
        try:
            probes = {key: (await (await producer.send(topic, b"probe", key=key))).partition for key in keys}
            await Publisher(SimpleNamespace(producer=SimpleNamespace(_ensure_producer=lambda: producer))).deliver(
                messages)
            return probes
        finally:
            await producer.stop()

    probes = asyncio.run(deliver())
    assert len(set(probes.values())) > 1  # the keys spread: the check below can tell partitions apart
    got = read_all(kafka_bootstrap, topic, 4, len(messages) + len(keys))
    placed = {(key, value): p for p, records in got.items() for key, value in records}
    assert len(placed) == len(messages) + len(keys)
    for _, key, value, partition in messages:
        assert placed[key, value] == (probes[key] if partition is None else partition), (key, value)
