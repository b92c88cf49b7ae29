"""End to end on real services: emitter -> Kafka -> worker -> chDB -> bands.

Expected values are computed here from the known inputs with the docs/metrics.md
formulas, independently of stream_jobs.derive.
"""

from __future__ import annotations

import json
import math
import time
import uuid

import clickhouse_connect
import numpy as np
import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka_events import records_in

from phasemeter.producers import Meter
from phasemeter.demo.synthetic import SyntheticGateway

pytestmark = pytest.mark.integration

EDGES = [(0, "0-512"), (512, "512-2k"), (2048, "2k-8k"), (8192, "8k-32k"), (32768, "32k+")]
QS = (1, 5, 50, 95, 99)


def bucket_of(n: int) -> str:
    return [label for lo, label in EDGES if n >= lo][-1]


def expected_row(g) -> dict:
    ttft, e2e = g["ttft_s"], g["e2e_s"]
    decode_s = None if ttft is None else e2e - ttft
    ok_decode = g["output_tokens"] > 1 and decode_s is not None and decode_s > 0
    return {
        "model": g["model"], "input_bucket": bucket_of(g["input_tokens"]),
        "ts_ms": round(g["t0"] * 1000),
        "prefill_tps": g["input_tokens"] / ttft if ttft else None,
        "decode_tps": (g["output_tokens"] - 1) / decode_s if ok_decode else None,
        "tpot_s": decode_s / (g["output_tokens"] - 1) if ok_decode else None,
        "decode_s": decode_s, "e2e_s": e2e, "ttft_s": ttft, "queue_s": g["queue_s"],
    }


def emit(bootstrap: str, topic: str, n: int, seed: int, envelope_size: int = 1) -> dict[str, dict]:
    gen = SyntheticGateway(start=time.time() - 3700, span_s=3600, seed=seed)
    meter = Meter(bootstrap_servers=bootstrap, topic=topic, gateway="test-gw", queue_size=n + 10,
                  envelope_size=envelope_size)
    sent = {}
    for i in range(n):
        g = gen.make(i / n)
        rid = uuid.uuid4().hex
        fields = dict(model=g.model, input_tokens=g.input_tokens, output_tokens=g.output_tokens, t0=g.t0,
                      ttft_s=g.ttft_s, e2e_s=g.e2e_s, queue_s=g.queue_s, status=g.status)
        meter.record(request_id=rid, replica=g.replica, **fields)
        sent[rid] = fields
    assert meter.flush(timeout_s=60)
    meter.close()
    stats = meter.stats()
    assert (stats.sent, stats.dropped, stats.failed) == (n, 0, 0)
    return sent


def topic_messages(bootstrap: str, topic: str) -> int:
    """Messages in every partition of `topic` (all from offset 0)."""
    from kafka import TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    try:
        parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
        return sum(consumer.end_offsets(parts).values())
    finally:
        consumer.close()


def stored_rows(env) -> list[dict]:
    client = clickhouse_connect.get_client(dsn=f"chdb://{env['PHASEMETER_DATA_DIR']}/store")
    try:
        client.database = env["PHASEMETER_DATABASE"]
        res = client.query("SELECT request_id, model, input_bucket, toUnixTimestamp64Milli(ts), prefill_tps, "
                           "decode_tps, tpot_s, decode_s, e2e_s, ttft_s, queue_s, gateway FROM generations")
        cols = ["request_id", "model", "input_bucket", "ts_ms", "prefill_tps", "decode_tps", "tpot_s",
                "decode_s", "e2e_s", "ttft_s", "queue_s", "gateway"]
        return [dict(zip(cols, r, strict=True)) for r in res.result_rows]
    finally:
        client.close()


def close(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def test_emit_5000_stored_once_with_exact_values_and_bands(worker, pm_env):
    worker.start()
    topic = pm_env["PHASEMETER_TOPIC"]
    sent = emit(pm_env["KAFKA_BOOTSTRAP_SERVERS"], topic, 5000, seed=11)
    # A few poison messages ride along: they go to the dead-letter topic.
    poison = [b"{not json", b'{"schema_version": 99, "kind": "generation"}', b"\xff\xfe",
              json.dumps({**next(iter(sent.values())), "schema_version": 1, "kind": "generation",
                          "request_id": "bad-order", "ttft_s": 5.0, "e2e_s": 1.0}).encode()]
    producer = KafkaProducer(bootstrap_servers=pm_env["KAFKA_BOOTSTRAP_SERVERS"])
    for p in poison:
        producer.send(topic, p, key=b"poison")
    producer.flush()
    health = worker.wait_processed(5000 + len(poison))
    assert health["accepted"] == 5000 and health["rejected"] == len(poison)

    # Bands through the CLI while the worker owns the store (routed over HTTP).
    out = worker.run("query", "bands", "--from", "-3h", "--to", "now", "--step", "10m", "--format", "json")
    payload = json.loads(out.stdout)
    assert "slow tail" in payload["legend"]["p1"] and "linear" in payload["method"]
    expected = {rid: expected_row(g) for rid, g in sent.items()}
    groups: dict[tuple, dict[str, list]] = {}
    for e in expected.values():
        key = (e["ts_ms"] // 600_000 * 600, e["model"], e["input_bucket"])
        grp = groups.setdefault(key, {"prefill": [], "decode": [], "n": 0})
        grp["n"] += 1
        for phase in ("prefill", "decode"):
            if e[f"{phase}_tps"] is not None:
                grp[phase].append(e[f"{phase}_tps"])
    rows = payload["rows"]
    assert len(rows) == len(groups)
    for row in rows:
        t = int(np.datetime64(row["t"].rstrip("Z"), "s").astype(int))
        grp = groups[(t, row["model"], row["input_bucket"])]
        assert row["n"] == grp["n"]
        for phase in ("prefill", "decode"):
            values = np.array(grp[phase])
            assert row[f"{phase}_n"] == len(values)
            for q in QS:
                got = row[f"{phase}_p{q}"]
                if len(values) == 0:
                    assert got is None
                else:
                    assert math.isclose(got, np.percentile(values, q, method="linear"), rel_tol=1e-9)

    dlq = records_in(pm_env["KAFKA_BOOTSTRAP_SERVERS"], pm_env["PHASEMETER_DLQ_TOPIC"], at_least=len(poison))
    reasons = sorted(json.loads(m.value)["reason"] for m in dlq)
    assert reasons == sorted(["malformed_json", "unknown_version", "not_utf8", "impossible_order"])

    worker.stop()
    stored = stored_rows(pm_env)
    assert len(stored) == 5000
    assert {r["request_id"] for r in stored} == set(sent)
    for r in stored:
        e = expected[r["request_id"]]
        assert (r["model"], r["input_bucket"], r["ts_ms"], r["gateway"]) == \
            (e["model"], e["input_bucket"], e["ts_ms"], "test-gw")
        for col in ("prefill_tps", "decode_tps", "tpot_s", "decode_s", "e2e_s", "ttft_s", "queue_s"):
            assert close(r[col], e[col]), (col, r[col], e[col])


def stored_once_after_restart(worker, pm_env, sent: dict) -> list[dict]:
    """Once the restarted worker has stored as many rows as were sent (and a
    would-be duplicate batch had time to land): each sent generation stored
    once. -> the stored rows."""
    deadline = time.monotonic() + 120
    while worker.stored_count() < len(sent) and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(2)
    diagnosis = worker.diagnose()
    worker.stop()
    stored = stored_rows(pm_env)
    ids = [r["request_id"] for r in stored]
    assert len(ids) == len(set(ids)), f"{len(ids) - len(set(ids))} stored twice; {diagnosis}"
    assert set(ids) == set(sent), f"missing {len(set(sent) - set(ids))}; {diagnosis}"
    return stored


def test_envelopes_store_every_generation_once(worker, pm_env):
    worker.start()
    sent = emit(pm_env["KAFKA_BOOTSTRAP_SERVERS"], pm_env["PHASEMETER_TOPIC"], 5000, seed=5, envelope_size=100)
    health = worker.wait_processed(5000)
    assert health["accepted"] == 5000 and health["rejected"] == 0
    # Each message in the topic consumed once, and they are envelopes, not one
    # per event. How full each envelope is depends on how fast the sender
    # drains its queue (it never waits to fill one): ~50 on a quiet machine,
    # 66 seen beside another test (the emitter's tests hold the packing).
    messages = topic_messages(pm_env["KAFKA_BOOTSTRAP_SERVERS"], pm_env["PHASEMETER_TOPIC"])
    assert health["consumed"] == messages <= 5000 // 10, (health["consumed"], messages)
    # Everything taken: no lag on any partition it owns (and it does know them)
    assert health["lag"] == 0 and health["lag_by_partition"], health
    worker.stop()
    stored = stored_rows(pm_env)
    assert sorted(r["request_id"] for r in stored) == sorted(sent)


def test_a_backlog_of_envelopes_is_decoded_a_batch_ahead_and_stored_once_exactly(worker, pm_env):
    """While a batch is written, the worker decodes the next one
    (ingest_agent.py). A backlog cut into small batches goes that way; a stop
    (SIGTERM) in the middle of it finishes the batch in hand wherever it finds
    the agent; and every generation is stored once with its exact values."""
    bootstrap, topic = pm_env["KAFKA_BOOTSTRAP_SERVERS"], pm_env["PHASEMETER_TOPIC"]
    pm_env["PHASEMETER_BATCH_BYTES"] = "60000"  # two envelopes of ~100 a batch
    sent = emit(bootstrap, topic, 12_000, seed=31, envelope_size=100)  # before the worker starts
    worker.start()
    deadline, health = time.monotonic() + 60, {}
    while health.get("accepted", 0) < 3000 and time.monotonic() < deadline:
        health = worker.health() or health
        time.sleep(0.02)
    worker.stop()  # SIGTERM, mid-backlog
    assert health.get("batches_decoded_ahead", 0) > 0, worker.diagnose()
    assert health["accepted"] < 12_000, "the backlog was drained before the stop: nothing tested"
    assert "stopping: finishing the batch in hand" in worker.log.read_text(errors="replace"), worker.diagnose()
    worker.start()  # the batch in hand when stopped was finished: more than `accepted` above are stored
    for r in stored_once_after_restart(worker, pm_env, sent):
        e = expected_row(sent[r["request_id"]])
        assert (r["model"], r["input_bucket"], r["ts_ms"]) == (e["model"], e["input_bucket"], e["ts_ms"])
        for col in ("prefill_tps", "decode_tps", "tpot_s", "decode_s", "e2e_s", "ttft_s", "queue_s"):
            assert close(r[col], e[col]), (col, r[col], e[col])


def test_a_starting_worker_imports_pandas_before_any_batch(worker):
    """pyarrow imports pandas on its first array whenever it is installed
    (stream_jobs/preload.py). A starting worker does it while it waits for
    Kafka: with nothing to read, pandas is loaded all the same, so the first
    batch after a restart does not pay 0.4-0.6 s for it."""
    from pathlib import Path

    from conftest import wait_for

    worker.start()

    def pandas_loaded() -> bool:
        return "/pandas/_libs/" in Path(f"/proc/{worker.proc.pid}/maps").read_text()

    wait_for(pandas_loaded, 30, "pandas loaded by a worker with nothing to read", explain=worker.diagnose)
    assert (worker.health() or {}).get("consumed", 0) == 0, worker.diagnose()

    # An idle worker's agents wait for records, and /debug/tasks says where.
    waits = wait_for(lambda: "batching.py" in worker.waits() and worker.waits(), 30,
                     "the ingest agent waiting in gather", explain=worker.diagnose)
    ingest = [line for line in waits.splitlines() if "ingest_agent.py" in line]
    assert ingest and "_ingest -> phasemeter/stream_jobs/batching.py" in ingest[0], waits
    assert any("join_agent.py" in line for line in waits.splitlines()), waits


def test_only_records_the_previous_owner_could_have_held_are_rechecked(worker, pm_env):
    """After a start, the cells of records that may have been in the previous
    owner's last batch are checked against raw (docs/delivery.md). None on a
    partition this store never recorded a position for; on a restart, the
    backlog's head, but not what was produced after the owner read the log's
    end."""
    bootstrap, topic = pm_env["KAFKA_BOOTSTRAP_SERVERS"], pm_env["PHASEMETER_TOPIC"]
    worker.start()
    emit(bootstrap, topic, 20, seed=21)
    health = worker.wait_processed(20)
    assert health.get("rollup_cells_checked", 0) == 0, (health, worker.diagnose())
    worker.stop()
    emit(bootstrap, topic, 50, seed=22)  # a backlog while no worker runs
    worker.start()
    checked = worker.wait_processed(50).get("rollup_cells_checked", 0)
    assert checked > 0, worker.diagnose()
    emit(bootstrap, topic, 200, seed=23)
    health = worker.wait_processed(250)
    assert health.get("rollup_cells_checked", 0) == checked, (checked, health, worker.diagnose())
    assert worker.stored_count() == 270
