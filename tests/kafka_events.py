"""Reading what the emitter put on a topic in tests: a message is one event
or an envelope of many (the Meter's default, producers/envelopes.py)."""

from __future__ import annotations

import json


def unwrap(value: bytes) -> list[dict]:
    """One Kafka message's events, in their order."""
    body = json.loads(value)
    return body["events"] if isinstance(body, dict) and body.get("kind") == "batch" else [body]


def records_in(bootstrap: str, topic: str, at_least: int = 0, timeout_s: float = 30.0) -> list:
    """Every record of `topic`, from its start to its end offsets, once at
    least `at_least` are there (a writer may still be flushing its last
    ones), in (partition, offset) order. It reads to the end offsets instead
    of until the topic has been quiet for consumer_timeout_ms, which cost
    every read that whole timeout (4-8 s; one rebalance test polled it)."""
    import time

    from kafka import KafkaConsumer, TopicPartition

    deadline = time.monotonic() + timeout_s
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    try:
        while True:
            parts = consumer.partitions_for_topic(topic) or set()
            tps = [TopicPartition(topic, p) for p in sorted(parts)]
            out = []
            if tps:
                consumer.assign(tps)
                consumer.seek_to_beginning(*tps)
                end = consumer.end_offsets(tps)
                while any(consumer.position(tp) < end[tp] for tp in tps):
                    if time.monotonic() > deadline:
                        raise AssertionError(f"{topic}: read {len(out)} records, positions "
                                             f"{ {tp.partition: consumer.position(tp) for tp in tps} } "
                                             f"short of the end offsets { {tp.partition: end[tp] for tp in tps} }")
                    for records in consumer.poll(timeout_ms=200).values():
                        out.extend(records)
            if len(out) >= at_least or time.monotonic() > deadline:
                return sorted(out, key=lambda r: (r.partition, r.offset))
            time.sleep(0.2)
    finally:
        consumer.close()
