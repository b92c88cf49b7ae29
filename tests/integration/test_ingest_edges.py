"""The worker's ingest edges on real services: inputs that once wedged it,
crashed it or were silently dropped. Each unit sent is stored or
dead-lettered with a reason, the worker stays up, and later good input flows.
"""

from __future__ import annotations

import json
import time
import uuid

import clickhouse_connect
import pytest
from conftest import wait_for
from corpus import event
from kafka import KafkaProducer
from kafka_events import records_in

from phasemeter.stream_jobs import reasons as R

pytestmark = pytest.mark.integration
DAY = 86_400.0


def open_store(env):
    client = clickhouse_connect.get_client(dsn=f"chdb://{env['PHASEMETER_DATA_DIR']}/store")
    client.database = env["PHASEMETER_DATABASE"]
    return client


def watch(worker, done, timeout_s: float = 120) -> list[dict]:
    """/health until `done(health)`; every reading, to check none was paused."""
    seen: list[dict] = []

    def step():
        h = worker.health()
        if h is not None:
            seen.append(h)
        return h is not None and done(h)

    wait_for(step, timeout_s, "the worker to process everything", worker.diagnose)
    return seen


def daily(n: int, tag: str, now: float) -> list[dict]:
    """n generations, one per day back from yesterday (a daily backfill)."""
    return [event(request_id=f"{tag}-{i}", t0=now - (i + 1) * DAY) for i in range(n)]


def test_300_days_in_one_envelope_and_in_an_emit_backfill_then_a_live_event_all_stored_without_a_pause(
        worker, pm_env, tmp_path):
    """generations is partitioned by day, and ClickHouse refuses an insert
    that touches more than 100 partitions (Code 252). That refusal used to
    be retried for ever: the worker paused, and every later event waited."""
    pm_env["PHASEMETER_RAW_TTL_DAYS"] = "400"  # 300 days back are inside what the store keeps
    worker.run("migrate")
    worker.start()
    topic, bootstrap = pm_env["PHASEMETER_TOPIC"], pm_env["KAFKA_BOOTSTRAP_SERVERS"]
    now = time.time()
    producer = KafkaProducer(bootstrap_servers=bootstrap, max_request_size=2_000_000)
    envelope = {"schema_version": 1, "kind": "batch", "events": daily(300, "env", now)}
    producer.send(topic, json.dumps(envelope).encode(), key=b"backfill")
    producer.flush()

    path = tmp_path / "backfill.ndjson"
    path.write_text("".join(json.dumps(e) + "\n" for e in daily(300, "emit", now)))
    out = worker.run("emit", "--no-progress", str(path))
    assert "300 sent" in out.stdout + out.stderr, out.stdout + out.stderr

    producer.send(topic, json.dumps(event(request_id="live", t0=time.time() - 1)).encode(), key=b"live")
    producer.flush()
    producer.close()

    seen = watch(worker, lambda h: h["accepted"] + h["rejected"] >= 601)
    last = seen[-1]
    assert (last["accepted"], last["rejected"]) == (601, 0), last
    assert len(seen) > 0
    assert [h["paused_reason"] for h in seen if h["status"] != "ok"] == []
    assert last["store_retries"] == 0
    worker.stop()
    client = open_store(pm_env)
    try:
        stored = {r for (r,) in client.query("SELECT request_id FROM generations").result_rows}
        minute = client.query("SELECT sum(n) FROM generations_minute").result_rows[0][0]
        days = client.query("SELECT uniqExact(toDate(ts)) FROM generations").result_rows[0][0]
    finally:
        client.close()
    assert len(stored) == 601 and "live" in stored
    assert days == 301  # 300 days back, and today
    assert minute == 601  # every tier counts each row once (the views' blocks deduplicated per insert)
