"""The SQL interface is read-only whatever the client sends: every input of
the table below, posted over real HTTP to a running worker, is refused with
ClickHouse's code, while events flow in; afterwards the store's tables are
as they were, every produced event was stored, and no file was written.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path

import pytest
import sql_worker
from corpus import event

pytestmark = [pytest.mark.integration]

OUTFILE = f"/tmp/phasemeter-refused-{uuid.uuid4().hex}.csv"
R, A, S = 164, 497, 62  # READONLY, ACCESS_DENIED, SYNTAX_ERROR

# (what is sent, URL parameters, the code ClickHouse's client gets)
REFUSED = [
    ("INSERT INTO generations (model) VALUES ('x')", {}, R),
    ("INSERT INTO generations SELECT * FROM generations", {}, R),
    ("/* a comment first */ INSERT INTO generations (model) VALUES ('x')", {}, R),
    ("CREATE TABLE t (a UInt8) ENGINE = Memory", {}, R),
    ("CREATE TABLE t ENGINE = URL('http://127.0.0.1:1/x', CSV) AS SELECT 1", {}, R),
    ("DROP TABLE generations", {}, R),
    ("TRUNCATE TABLE generations", {}, R),
    ("ALTER TABLE generations DELETE WHERE 1", {}, R),
    ("DELETE FROM generations WHERE 1", {}, R),
    ("RENAME TABLE generations TO g2", {}, R),
    ("DETACH TABLE generations", {}, R),
    ("ATTACH TABLE generations", {}, R),
    ("BACKUP TABLE generations TO File('x')", {}, R),
    ("GRANT ALL ON *.* TO default", {}, R),
    ("SYSTEM FLUSH LOGS", {}, R),
    ("SYSTEM SHUTDOWN", {}, R),
    ("KILL QUERY WHERE 1", {}, R),
    ("OPTIMIZE TABLE generations FINAL", {}, R),
    ("SET max_result_rows = 0", {}, R),
    ("SET readonly = 0", {}, R),
    ("USE system", {}, R),
    ("EXPLAIN AST INSERT INTO generations (model) VALUES ('x')", {}, R),
    ("SELECT 1 SETTINGS readonly = 0", {}, R),
    ("SELECT 1 SETTINGS max_result_rows = 0", {}, R),
    ("SELECT 1 SETTINGS max_execution_time = 0", {}, R),
    ("SELECT 1 SETTINGS max_memory_usage = 0", {}, R),
    ("SELECT * FROM (SELECT 1 SETTINGS max_result_bytes = 0)", {}, R),
    ("SELECT 1", {"readonly": "0"}, R),
    ("SELECT 1", {"max_result_rows": "0"}, R),
    ("SELECT 1", {"max_execution_time": "1000000"}, R),
    ("SELECT 1", {"allow_ddl": "1"}, R),
    ("SELECT 1", {"format_schema": "/etc/passwd"}, R),
    (f"SELECT 1 INTO OUTFILE '{OUTFILE}'", {}, A),
    (f"SELECT 1 INTO OUTFILE '{OUTFILE}' FORMAT CSV", {}, A),
    ("SELECT 1; SELECT 2", {}, S),
    (f"SELECT 1; SELECT 1 INTO OUTFILE '{OUTFILE}'", {}, S),
    ("SELECT 1 -- ;\n; DROP TABLE generations", {}, S),
    ("SELECT * FROM file('/etc/passwd', 'LineAsString')", {}, A),
    ("select * from FILE('/etc/passwd', 'LineAsString')", {}, A),
    ("SELECT * FROM `file`('/etc/passwd', 'LineAsString')", {}, A),
    ("SELECT file('/etc/passwd')", {}, A),
    ("SELECT * FROM url('http://127.0.0.1:1/x', 'CSV', 'a String')", {}, A),
    ("SELECT * FROM s3('http://127.0.0.1:1/b/k', 'CSV', 'a String')", {}, A),
    ("SELECT * FROM hdfs('hdfs://127.0.0.1:1/x', 'CSV', 'a String')", {}, A),
    ("SELECT * FROM remote('127.0.0.1:1', system.one)", {}, A),
    ("SELECT * FROM remoteSecure('127.0.0.1:1', system.one)", {}, A),
    ("SELECT * FROM cluster('default', system.one)", {}, A),
    ("SELECT * FROM mysql('127.0.0.1:1', 'db', 't', 'u', 'p')", {}, A),
    ("SELECT * FROM postgresql('127.0.0.1:1', 'db', 't', 'u', 'p')", {}, A),
    ("SELECT * FROM jdbc('jdbc:x', 't')", {}, A),
    ("SELECT * FROM odbc('DSN=x', 't')", {}, A),
    ("SELECT * FROM sqlite('/tmp/x.db', 't')", {}, A),
    ("SELECT * FROM mongodb('127.0.0.1:1', 'db', 'c', 'u', 'p', 'a String')", {}, A),
    ("SELECT * FROM executable('cat /etc/passwd', 'CSV', 'a String')", {}, A),
    ("SELECT * FROM input('a String')", {}, A),
    ("SELECT * FROM Python(df)", {}, A),
    ("SELECT * FROM iceberg('/tmp/x')", {}, A),
    ("SELECT * FROM fileCluster('default', '/etc/passwd')", {}, A),
    ("SELECT * FROM dictionary('d')", {}, A),
    ("SELECT dictGet('d', 'a', toUInt64(1))", {}, A),
    ("SELECT dictHas('d', toUInt64(1))", {}, A),
    ("SELECT catboostEvaluate('/tmp/model.bin', 1)", {}, A),
    ("SELECT * FROM numbers(1) AS n JOIN url('http://127.0.0.1:1/x', 'CSV', 'number UInt64') AS u USING number",
     {}, A),
    ("SELECT * FROM (SELECT * FROM file('/etc/passwd', 'LineAsString'))", {}, A),
    ("SELECT number IN (SELECT * FROM file('x', 'CSV', 'a UInt64')) FROM numbers(1)", {}, A),
    ("WITH (SELECT count() FROM file('/etc/passwd', 'LineAsString')) AS c SELECT c", {}, A),
    ("SELECT * FROM generations UNION ALL SELECT * FROM file('x', 'CSV', 'a String')", {}, A),
]


def _tables(w) -> bytes:
    status, _, body = sql_worker.post(w.sql_url, "SELECT name, engine, create_table_query FROM system.tables "
                                                 "WHERE database = currentDatabase() ORDER BY name")
    assert status == 200, body
    return body


def _count(w) -> int:
    status, _, body = sql_worker.post(w.sql_url, "SELECT count() FROM generations")
    assert status == 200, body
    return int(body)


@pytest.fixture(scope="module")
def sqlw(kafka_bootstrap, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sqlrefused")
    t0 = (time.time() - 3 * 3600) // 60 * 60
    w = sql_worker.start(sql_worker.sql_env(kafka_bootstrap, tmp), tmp, t0)
    yield w
    w.stop()


def test_refusals_each_with_its_code_while_ingest_goes_on(sqlw):
    from kafka import KafkaProducer

    w = sqlw
    before_tables, before_count = _tables(w), _count(w)
    assert before_count == sql_worker.N
    producer = KafkaProducer(bootstrap_servers=w.env["KAFKA_BOOTSTRAP_SERVERS"])
    sent, stop = [], threading.Event()

    def produce():
        while not stop.is_set():
            producer.send(w.env["PHASEMETER_TOPIC"],
                          json.dumps(event(request_id=uuid.uuid4().hex, t0=time.time() - 5)).encode())
            sent.append(1)
            time.sleep(0.01)

    feeder = threading.Thread(target=produce, daemon=True)
    feeder.start()
    got = []
    try:
        assert len(REFUSED) >= 40
        for sql, params, code in REFUSED:
            status, headers, body = sql_worker.post(w.sql_url, sql, **params)
            got.append((sql, params, status, headers.get("X-ClickHouse-Exception-Code"), body.decode()[:200]))
    finally:
        stop.set()
        feeder.join()
        producer.flush()
        producer.close()
    wrong = [(g, code) for g, (_, _, code) in zip(got, REFUSED, strict=True)
             if g[3] != str(code) or not g[4].startswith(f"Code: {code}. DB::Exception: ") or g[2] < 400]
    assert wrong == []
    assert len(sent) > 0
    w.wait_processed(len(sent))
    deadline = time.monotonic() + 60
    while _count(w) < sql_worker.N + len(sent) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _count(w) == sql_worker.N + len(sent)  # every event stored, nothing else
    assert _tables(w) == before_tables
    assert not Path(OUTFILE).exists()
    status, _, body = sql_worker.post(w.sql_url, "SELECT count() FROM generations WHERE model = 'x'")
    assert (status, body) == (200, b"0\n")


def test_ingest_is_not_blocked_by_a_long_query(sqlw):
    """A query holding the interface for seconds runs on its own handle: the
    store keeps taking events meanwhile (bounded from the query's own time)."""
    from kafka import KafkaProducer

    w = sqlw
    start_count = _count(w)
    result = {}

    def long_query():
        t = time.monotonic()
        result["status"] = sql_worker.post(w.sql_url, "SELECT count() FROM numbers(400000000) "
                                                      "WHERE sipHash64(number) % 7 = 1")[0]
        result["took"] = time.monotonic() - t

    runner = threading.Thread(target=long_query)
    runner.start()
    time.sleep(0.3)
    producer = KafkaProducer(bootstrap_servers=w.env["KAFKA_BOOTSTRAP_SERVERS"])
    producer.send(w.env["PHASEMETER_TOPIC"],
                  json.dumps(event(request_id=uuid.uuid4().hex, t0=time.time() - 5)).encode())
    producer.flush()
    producer.close()
    t = time.monotonic()
    while _count(w) < start_count + 1 and runner.is_alive():
        time.sleep(0.05)
    stored_after = time.monotonic() - t
    runner.join()
    assert result["status"] == 200
    assert _count(w) == start_count + 1
    assert stored_after < result["took"], (stored_after, result)
