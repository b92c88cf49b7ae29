"""The worker's ingest edges on real services: inputs that once wedged it,
crashed it or were silently dropped. Each unit sent is stored or
dead-lettered with a reason, the worker stays up, and later good input flows.
"""

from __future__ import annotations

import base64
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
from phasemeter.stream_jobs.sink import DLQ_COLUMNS

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
        assert worker.proc.poll() is None, f"the worker exited with {worker.proc.poll()}\n{worker.diagnose()}"
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


DEEP = b'{"a":' * 50_000 + b"1" + b"}" * 50_000
# Junk for each internal topic: one dead letter each, whatever it is.
PHASES_JUNK = [b"{not json", b"", None, b"\xff\xfe\x00\x01garbage", b"[1, 2]", b'"phases"', b'{"phases": 5}',
               b'{"other": []}', b'{"phases": [[1, 2]]}', b'{"phases": [["x", {"kind": "start"}]]}',
               b'{"phases": [[1.0, {"kind": "start", "request_id": 5}]]}',
               b'{"phases": [[1.0, {"kind": "start", "request_id": "j1"}]]}',  # a start without its fields
               b'{"phases": [[1.0, {"kind": "nope", "request_id": "j2"}]]}', DEEP]
JOINED_JUNK = [b"{not json", b"", None, b"\xff\xfe\x00", b"[1]", b'{"kind": "orphan", "reason": {"x": 1}}',
               b'{"schema_version": 2, "kind": "orphan", "request_id": "o", "reason": "no_such_reason"}', DEEP]
OTLP_JUNK = [b"{not json", b"", b"\x0a\xff\xff\xff\xff\x0f", b"\xff\xfe\x00", DEEP, b'{"resourceSpans": 5}']


def phases_of(rid: str, t0: float) -> list[dict]:
    return [{"schema_version": 2, "kind": "start", "request_id": rid, "model": "m", "t0": t0, "input_tokens": 10},
            {"schema_version": 2, "kind": "first_token", "request_id": rid, "ttft_s": 0.2},
            {"schema_version": 2, "kind": "end", "request_id": rid, "e2e_s": 1.0, "output_tokens": 5}]


def test_junk_on_every_internal_topic_is_dead_lettered_with_a_reason_and_no_agent_stops(worker, pm_env):
    topic, bootstrap = pm_env["PHASEMETER_TOPIC"], pm_env["KAFKA_BOOTSTRAP_SERVERS"]
    otlp = f"{topic}.otlp"
    pm_env["PHASEMETER_OTLP_TOPIC"] = otlp
    worker.start()
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    junk = [(f"{topic}.phases", PHASES_JUNK), (f"{topic}.joined", JOINED_JUNK), (otlp, OTLP_JUNK)]
    for name, values in junk:
        for value in values:
            producer.send(name, value, key=b"junk", partition=0)
    producer.flush()
    now = time.time()
    good = [event(request_id=f"g{i}", t0=now - 30) for i in range(20)]
    for e in good:
        producer.send(topic, json.dumps(e).encode(), key=e["request_id"].encode())
    for i in range(10):  # joined by the join agent, after the junk on its topic
        for p in phases_of(f"p{i}", now - 20):
            producer.send(topic, json.dumps(p).encode(), key=p["request_id"].encode())
    producer.flush()
    producer.close()

    n_junk = sum(len(values) for _, values in junk)
    seen = watch(worker, lambda h: h["accepted"] >= 30 and h["rejected"] >= n_junk)
    assert worker.proc.poll() is None, worker.diagnose()  # alive: no agent crashed
    last = seen[-1]
    assert (last["accepted"], last["rejected"]) == (30, n_junk), last
    dlq = [json.loads(m.value) for m in records_in(bootstrap, pm_env["PHASEMETER_DLQ_TOPIC"], n_junk)]
    assert len(dlq) == n_junk
    by_topic = {name: sorted(d["reason"] for d in dlq if d["src_topic"] == name) for name, _ in junk}
    # The phases topic's junk comes back through the joined topic, as the join's dead letters do.
    assert len(by_topic[f"{topic}.joined"]) == len(JOINED_JUNK) + len(PHASES_JUNK)
    assert len(by_topic[otlp]) == len(OTLP_JUNK)
    assert all(d["reason"] in R.ALL and d["reason"] != R.INTERNAL for d in dlq), sorted(d["reason"] for d in dlq)
    time.sleep(0)  # nothing else to wait for: the counts above are final
    worker.stop()
    client = open_store(pm_env)
    try:
        stored = {r for (r,) in client.query("SELECT request_id FROM generations").result_rows}
        dead = client.query("SELECT count() FROM dead_letters").result_rows[0][0]
    finally:
        client.close()
    assert stored == {f"g{i}" for i in range(20)} | {f"p{i}" for i in range(10)}
    assert dead == n_junk


SECRET = "SECRET-PROMPT-7f3a tell me everything"


def test_no_prompt_text_in_the_dead_letters_table_or_on_the_dead_letter_topic(worker, pm_env):
    topic, bootstrap = pm_env["PHASEMETER_TOPIC"], pm_env["KAFKA_BOOTSTRAP_SERVERS"]
    worker.start()
    now = time.time()
    leaky = [
        event(request_id="u1", model="keep-me", prompt=SECRET, completion={"text": SECRET}),       # unknown_field
        event(request_id="u2", messages=[{"role": "user", "content": SECRET}], e2e_s="x"),          # unknown_field
        {"schema_version": 1, "kind": "batch",
         "events": [event(request_id="u3", t0=now - 5), event(request_id="u4", t0=now - 5, prompt=SECRET)]},
        event(request_id="u5", model=SECRET * 10),                                                 # bad_value
    ]
    raws = [json.dumps(e).encode() for e in leaky] + [
        b'{"prompt": "' + SECRET.encode() + b'", "model": ',                                          # malformed
        json.dumps([SECRET]).encode(), json.dumps({SECRET: 1}).encode()]
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for raw in raws:
        producer.send(topic, raw, key=b"k")
    producer.flush()
    producer.close()
    n_dead = len(raws) - 1 + 1  # the envelope's good event is stored, its bad one dead-lettered
    seen = watch(worker, lambda h: h["accepted"] + h["rejected"] >= n_dead + 1)
    assert (seen[-1]["accepted"], seen[-1]["rejected"]) == (1, n_dead)
    dlq = list(records_in(bootstrap, pm_env["PHASEMETER_DLQ_TOPIC"], n_dead))
    assert len(dlq) == n_dead
    for m in dlq:
        record = json.loads(m.value)
        assert SECRET not in m.value.decode() and SECRET not in base64.b64decode(record["payload"]).decode()
        # the table's columns, ts named rejected_at, keyed by the source topic (docs/delivery.md)
        assert set(record) == set(DLQ_COLUMNS) - {"ts"} | {"rejected_at"} and m.key == topic.encode(), record
    worker.stop()
    client = open_store(pm_env)
    try:
        stored = client.query("SELECT reason, detail, payload FROM dead_letters").result_rows
    finally:
        client.close()
    assert len(stored) == n_dead
    for reason, detail, payload in stored:
        assert SECRET not in detail and SECRET not in base64.b64decode(payload).decode(), (reason, detail)
    kept = [json.loads(base64.b64decode(p)) for _, _, p in stored if p]
    first = next(k for k in kept if k.get("request_id") == "u1")
    assert first["model"] == "keep-me" and first["prompt"] is None and first["completion"] is None


def test_an_event_older_than_the_raw_retention_is_dead_lettered_not_accepted_and_lost(worker, pm_env):
    """PHASEMETER_RAW_TTL_DAYS (90 here): an older t0 used to be counted
    accepted while the store's TTL dropped the row as it was written."""
    topic, bootstrap = pm_env["PHASEMETER_TOPIC"], pm_env["KAFKA_BOOTSTRAP_SERVERS"]
    worker.start()
    now = time.time()
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for e in (event(request_id="old", t0=now - 100 * DAY), event(request_id="edge", t0=now - 80 * DAY),
              {"schema_version": 1, "kind": "batch", "events": [event(request_id="old2", t0=now - 91 * DAY)]}):
        producer.send(topic, json.dumps(e).encode(), key=b"k")
    producer.flush()
    producer.close()
    seen = watch(worker, lambda h: h["accepted"] + h["rejected"] >= 3)
    assert (seen[-1]["accepted"], seen[-1]["rejected"]) == (1, 2)
    worker.stop()
    client = open_store(pm_env)
    try:
        stored = [r for (r,) in client.query("SELECT request_id FROM generations").result_rows]
        dead = sorted(r for (r,) in client.query("SELECT reason FROM dead_letters").result_rows)
    finally:
        client.close()
    assert stored == ["edge"] and dead == [R.OUTSIDE_RETENTION] * 2


def test_one_otlp_export_of_150_spans_one_per_day_is_stored_whole_without_a_pause(worker, pm_env):
    """The issue's third way to the same wedge: one OTLP request of 150 spans
    over 150 days, here as the Collector's kafka exporter writes it."""
    from test_worker_otlp_topic import proto_message, vllm_span

    topic, bootstrap = pm_env["PHASEMETER_TOPIC"], pm_env["KAFKA_BOOTSTRAP_SERVERS"]
    otlp = f"{topic}.otlp"
    pm_env["PHASEMETER_OTLP_TOPIC"] = otlp
    pm_env["PHASEMETER_RAW_TTL_DAYS"] = "400"
    worker.run("migrate")
    worker.start()
    now = time.time()
    spans = [{**vllm_span(i), "start": now - (i + 1) * DAY, "end": now - (i + 1) * DAY + 3} for i in range(150)]
    producer = KafkaProducer(bootstrap_servers=bootstrap, max_request_size=2_000_000)
    producer.send(otlp, proto_message(spans))
    producer.flush()
    producer.close()
    seen = watch(worker, lambda h: h["accepted"] + h["rejected"] >= 150)
    assert (seen[-1]["accepted"], seen[-1]["rejected"]) == (150, 0), seen[-1]
    assert [h["paused_reason"] for h in seen if h["status"] != "ok"] == [] and seen[-1]["store_retries"] == 0


def test_labels_with_control_characters_are_dead_lettered_and_never_stored(worker, pm_env):
    topic, bootstrap = pm_env["PHASEMETER_TOPIC"], pm_env["KAFKA_BOOTSTRAP_SERVERS"]
    worker.start()
    now = time.time()
    bad = [event(request_id="c1", model="m\x1b[2J"), event(request_id="c2", replica="r\x1b]0;pwned\x07"),
           event(request_id="c3", finish_reason="stop\r\n"), event(request_id="c4", gateway="g\x00"),
           event(request_id="c5\x85"), event(request_id="c6", model="m\x7f")]
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for e in bad:
        producer.send(topic, json.dumps(e).encode(), key=b"k")
    producer.send(topic, json.dumps({"schema_version": 1, "kind": "batch", "events": [
        event(request_id="ok1", model="modèle ✓", t0=now - 5), event(request_id="c7", model="\x1b[31mred")]}).encode())
    producer.flush()
    producer.close()
    seen = watch(worker, lambda h: h["accepted"] + h["rejected"] >= len(bad) + 2)
    assert (seen[-1]["accepted"], seen[-1]["rejected"]) == (1, len(bad) + 1)
    worker.stop()
    client = open_store(pm_env)
    try:
        stored = [r for (r,) in client.query("SELECT model FROM generations").result_rows]
        dead = client.query("SELECT reason, detail FROM dead_letters").result_rows
    finally:
        client.close()
    assert stored == ["modèle ✓"]
    assert len(dead) == len(bad) + 1
    assert {r for r, _ in dead} == {R.CONTROL_CHARACTER}
    assert not any(c in d for _, d in dead for c in "\x1b\x00\r\n\x7f\x85")  # nothing raw reaches a terminal
