"""A 10,000-replica flood, through a real Kafka broker and the worker into
chDB, leaves at most K + 1 replica values per model in the store, across a
worker restart between the two halves of the flood (docs/labels.md)."""

from __future__ import annotations

import json
import time

import clickhouse_connect
from kafka import KafkaProducer

K = 5


def flood(bootstrap: str, topic: str, first: int, n: int, t0: float) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    events = [{"schema_version": 1, "kind": "generation", "request_id": f"flood-{i}",
               "model": f"m{i % 2}", "t0": t0 + i * 0.001, "ttft_s": 0.2, "e2e_s": 1.0,
               "input_tokens": 100, "output_tokens": 20, "replica": f"pod-{i}"} for i in range(first, first + n)]
    for lo in range(0, n, 500):
        producer.send(topic, json.dumps({"schema_version": 1, "kind": "batch",
                                         "events": events[lo:lo + 500]}).encode())
    producer.flush()
    producer.close()


def test_a_10000_replica_flood_leaves_k_plus_one_values_per_model(worker, pm_env):
    worker.env["PHASEMETER_LABEL_TOP_K"] = str(K)
    t0 = time.time() - 3600
    worker.start()
    flood(pm_env["KAFKA_BOOTSTRAP_SERVERS"], pm_env["PHASEMETER_TOPIC"], 0, 5000, t0)
    health = worker.wait_processed(5000, timeout_s=120)
    assert health["labels_other_replica"] == 5000 - 2 * K, worker.diagnose()
    worker.stop()
    worker.start()  # the kept values are read back from the store
    flood(pm_env["KAFKA_BOOTSTRAP_SERVERS"], pm_env["PHASEMETER_TOPIC"], 5000, 5000, t0)
    health = worker.wait_processed(5000, timeout_s=120)
    assert health["labels_other_replica"] == 5000, worker.diagnose()
    worker.stop()

    client = clickhouse_connect.get_client(dsn=f"chdb://{pm_env['PHASEMETER_DATA_DIR']}/store")
    try:
        client.database = pm_env["PHASEMETER_DATABASE"]
        got = client.query("SELECT model, uniqExact(replica), count() FROM generations GROUP BY model "
                           "ORDER BY model").result_rows
        others = client.query("SELECT count() FROM generations WHERE replica = 'other'").result_rows[0][0]
    finally:
        client.close()
    assert got == [("m0", K + 1, 5000), ("m1", K + 1, 5000)]
    assert others == 10_000 - 2 * K
