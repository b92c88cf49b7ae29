"""publish.Publisher: a batch's dead letters and phases are acknowledged by
Kafka before the batch records its progress; what Kafka refuses is sent
again, never dropped. The producer here is a stand-in that refuses what it
is told to, the way aiokafka does: a failed delivery future, or an error
raised by send() itself for a record over its limits."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from phasemeter.stream_jobs.publish import Publisher


class Batch:
    def __init__(self, size: int = 2):
        self.records, self.size = [], size

    def append(self, key, value, timestamp):  # noqa: ARG002
        if len(self.records) == self.size:
            return None  # full, as aiokafka's BatchBuilder says it
        self.records.append((key, value))
        return object()


class Producer:
    """aiokafka's batch API as publish.send_batched uses it: a batch is
    acknowledged or refused whole, as Kafka writes a partition's batch."""

    def __init__(self, refuse_on_delivery: int = 0, refuse_on_send: int = 0, partitions: int = 3):
        self.refuse_on_delivery, self.refuse_on_send = refuse_on_delivery, refuse_on_send
        self.partitions = partitions
        self.attempts: list[bytes] = []
        self.acked: list[bytes] = []
        self.placed: list[tuple[bytes, int]] = []

    def _ensure_producer(self):
        return self

    def create_batch(self):
        return Batch()

    async def partitions_for(self, topic):  # noqa: ARG002
        return set(range(self.partitions))

    def _partition(self, topic, partition, key, value, serialized_key, serialized_value):  # noqa: ARG002
        return sum(serialized_key or b"") % self.partitions

    async def send_batch(self, batch, topic, *, partition):  # noqa: ARG002
        values = [v for _, v in batch.records]
        self.attempts += values
        if b"big" in values and self.refuse_on_send:
            self.refuse_on_send -= 1
            raise RuntimeError("MessageSizeTooLargeError: the message is 2000000 bytes")
        fut = asyncio.get_running_loop().create_future()
        if b"bad" in values and self.refuse_on_delivery:
            self.refuse_on_delivery -= 1
            fut.set_exception(RuntimeError("TopicAuthorizationFailedError"))
        else:
            self.acked += values
            self.placed += [(v, partition) for v in values]
            fut.set_result(None)
        return fut


def _publisher(producer) -> Publisher:
    return Publisher(SimpleNamespace(producer=producer), max_backoff_s=0.05)


def _messages(*values: bytes, partition: int | None = 0):
    return [("topic", None, v, partition) for v in values]


def test_everything_acknowledged_returns_at_once():
    producer = Producer()
    pub = _publisher(producer)
    asyncio.run(pub.deliver(_messages(b"a", b"b")))
    assert producer.acked == [b"a", b"b"] and pub.retries == 0 and pub.paused_reason is None


def test_a_refused_delivery_is_sent_again_until_acknowledged():
    """Only the refused batch goes again: its records are acknowledged once,
    and those of the other partition's batch are not sent twice."""
    producer = Producer(refuse_on_delivery=3)
    pub = _publisher(producer)
    asyncio.run(pub.deliver(_messages(b"a", b"c") + _messages(b"bad", partition=1)))
    assert producer.acked == [b"a", b"c", b"bad"]  # each exactly once
    assert producer.attempts.count(b"bad") == 4 and producer.attempts.count(b"a") == 1
    assert pub.retries == 3 and pub.paused_reason is None


def test_a_batch_refused_by_send_itself_is_sent_again():
    producer = Producer(refuse_on_send=1)
    pub = _publisher(producer)
    asyncio.run(pub.deliver(_messages(b"big", b"x")))
    assert sorted(producer.acked) == [b"big", b"x"] and pub.retries == 1


def test_records_fill_batches_and_keyed_ones_go_where_the_partitioner_puts_their_key():
    producer = Producer()
    keyed = [("topic", b"gen", b"k%d" % i, None) for i in range(5)] + [("topic", b"gen.otlp", b"o", None)]
    asyncio.run(_publisher(producer).deliver(keyed + _messages(b"p0", b"p1")))
    assert len(producer.acked) == 8 and set(producer.acked) == {m[2] for m in keyed} | {b"p0", b"p1"}
    where = dict(producer.placed)
    assert {where[b"k%d" % i] for i in range(5)} == {sum(b"gen") % 3} and where[b"o"] == sum(b"gen.otlp") % 3
    assert (where[b"p0"], where[b"p1"]) == (0, 0)


def test_while_refused_health_says_why_and_the_batch_waits():
    async def main():
        producer = Producer(refuse_on_delivery=10**9)  # refused until the test stops it
        pub = _publisher(producer)
        task = asyncio.ensure_future(pub.deliver(_messages(b"bad")))
        await asyncio.sleep(0.3)
        reason = pub.paused_reason
        assert not task.done()  # the batch has not recorded progress
        task.cancel()  # a stop cuts the wait; the batch is re-read from its durable position
        with pytest.raises(asyncio.CancelledError):
            await task
        return reason, producer.acked

    reason, acked = asyncio.run(main())
    assert acked == []
    assert "Kafka refused 1 record(s) for topic" in reason and "TopicAuthorizationFailedError" in reason
