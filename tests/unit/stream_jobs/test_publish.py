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


class Producer:
    def __init__(self, refuse_on_delivery: int = 0, refuse_on_send: int = 0):
        self.refuse_on_delivery, self.refuse_on_send = refuse_on_delivery, refuse_on_send
        self.attempts: list[bytes] = []
        self.acked: list[bytes] = []

    async def send(self, topic, key, value, partition, timestamp, headers):  # noqa: ARG002
        self.attempts.append(value)
        if value == b"big" and self.refuse_on_send:
            self.refuse_on_send -= 1
            raise RuntimeError("MessageSizeTooLargeError: the message is 2000000 bytes")
        fut = asyncio.get_running_loop().create_future()
        if value == b"bad" and self.refuse_on_delivery:
            self.refuse_on_delivery -= 1
            fut.set_exception(RuntimeError("TopicAuthorizationFailedError"))
        else:
            self.acked.append(value)
            fut.set_result(None)
        return fut


def _publisher(producer) -> Publisher:
    return Publisher(SimpleNamespace(producer=producer), max_backoff_s=0.05)


def _messages(*values: bytes):
    return [("topic", None, v, 0) for v in values]


def test_everything_acknowledged_returns_at_once():
    producer = Producer()
    pub = _publisher(producer)
    asyncio.run(pub.deliver(_messages(b"a", b"b")))
    assert producer.acked == [b"a", b"b"] and pub.retries == 0 and pub.paused_reason is None


def test_a_refused_delivery_is_sent_again_until_acknowledged():
    producer = Producer(refuse_on_delivery=3)
    pub = _publisher(producer)
    asyncio.run(pub.deliver(_messages(b"a", b"bad", b"c")))
    assert producer.acked == [b"a", b"c", b"bad"]  # each exactly once
    assert producer.attempts.count(b"bad") == 4 and producer.attempts.count(b"a") == 1
    assert pub.retries == 3 and pub.paused_reason is None


def test_a_record_refused_by_send_itself_is_sent_again():
    producer = Producer(refuse_on_send=1)
    pub = _publisher(producer)
    asyncio.run(pub.deliver(_messages(b"big", b"x")))
    assert sorted(producer.acked) == [b"big", b"x"] and pub.retries == 1


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
