"""A restarted worker re-reads what its store does not hold even when Faust
delivers nothing: the group's committed offset past the store's positions
(as Faust once committed an acked gap), and no new record arriving to show
a gap. The idle check reads each owned partition's durable position and
seeks it back (stream_jobs/resume.py, docs/delivery.md)."""

from __future__ import annotations

import json
import time

import pytest
from conftest import wait_for
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def produce(bootstrap: str, topic: str, first: int, n: int) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    for i in range(first, first + n):
        event = {"schema_version": 1, "kind": "generation", "request_id": f"r-{i}", "model": "m",
                 "t0": time.time() - 60, "ttft_s": 0.2, "e2e_s": 1.5, "input_tokens": 300 + i,
                 "output_tokens": 20}
        producer.send(topic, json.dumps(event).encode(), partition=i % 4)
    producer.flush()
    producer.close()


def commit_at_the_end(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's offsets moved to each partition's end, from outside the
    (empty) group: what Faust's own commit of an acked gap looked like."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        ends = consumer.end_offsets(tps)
        consumer.commit({tp: OffsetAndMetadata(o, "", -1) for tp, o in ends.items()})
        return {tp.partition: o for tp, o in ends.items()}
    finally:
        consumer.close()


def test_records_behind_a_committed_offset_past_the_store_are_read_with_nothing_new_arriving(worker, pm_env):
    bootstrap, topic, group = pm_env["KAFKA_BOOTSTRAP_SERVERS"], pm_env["PHASEMETER_TOPIC"], pm_env[
        "PHASEMETER_GROUP_ID"]
    worker.start()
    produce(bootstrap, topic, 0, 200)
    worker.wait_processed(200)
    worker.stop()
    produce(bootstrap, topic, 200, 300)  # in the log, past the store's positions
    ends = commit_at_the_end(bootstrap, group, topic)
    assert sum(ends.values()) == 500
    worker.start()
    # Faust starts each partition at the committed end: it delivers nothing.
    wait_for(lambda: worker.stored_count() == 500, 90, "the 300 records behind the committed offset stored",
             explain=lambda: f"stored {worker.stored_count()} of 500\n{worker.diagnose()}")
    h = worker.health()
    assert h["idle_reseeks"] >= 1 and h["rejected"] == 0, h
    assert worker.stored_count() == 500  # each once
