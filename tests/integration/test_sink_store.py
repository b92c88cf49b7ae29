"""Sink.write into a real chDB store: what is stored is what was derived.
Every column round-trips, None stays NULL (never 0 or NaN), ts keeps its
exact millisecond, and a re-sent batch is stored once in the raw table and
counted once in every view's target."""

from __future__ import annotations

import time
import pytest

from stores import migrated_client
from phasemeter.stream_jobs.derive import ROW_COLUMNS
from phasemeter.stream_jobs.sink import Sink

pytestmark = pytest.mark.integration
T0 = time.time() // 60 * 60 - 3600  # a whole minute an hour ago (inside the raw TTL)


@pytest.fixture
def client(tmp_path):
    with migrated_client(tmp_path, "t_sink") as c:
        yield c


def row(i: int, **over) -> dict:
    base = {c: None for c in ROW_COLUMNS}
    base.update(ts=T0 + i * 0.001 + 0.0004, request_id=f"r{i}", model="m", input_bucket="0-1k", status="ok",
                finish_reason="stop", gateway="g", replica="", prefill_replica="", decode_replica="", input_tokens=100 + i, output_tokens=10, queue_s=0.01,
                ttft_s=0.5, decode_s=1.0, e2e_s=1.5, prefill_tps=200.0, decode_tps=9.0, tpot_s=0.1,
                output_tokens_estimated=0, schema_version=1, src_topic="t", src_partition=0, src_offset=i)
    base.update(over)
    return base


def test_stored_rows_equal_the_derived_ones_nulls_and_milliseconds_included(client):
    rows = [row(0, cached_input_tokens=7, max_gap_s=0.3, stalled=1, chunks=12, gap_threshold_s=0.25,
                output_tokens_estimated=1, prefill_replica="p-0", decode_replica="d-1", kv_transfer_s=0.042,
                streamed=1),
            row(1, ttft_s=None, prefill_tps=None, decode_tps=None, tpot_s=None, queue_s=None, decode_s=None,
                status="error", streamed=0),
            row(2, ts=T0 + 0.9996)]
    Sink.over(client, "chdb").write(rows, [])
    cols = ", ".join(ROW_COLUMNS)
    got = client.query(f"SELECT {cols}, toUnixTimestamp64Milli(ts) FROM generations ORDER BY src_offset").result_rows
    assert [g[-1] for g in got] == [int(T0) * 1000 + 0, int(T0) * 1000 + 1, int(T0) * 1000 + 1000]
    for want, have in zip(rows, got, strict=True):
        stored = dict(zip(ROW_COLUMNS, have[:-1], strict=True))  # the last: ts in milliseconds
        stored.pop("ts")  # checked above, as epoch milliseconds
        assert len(stored) == len(ROW_COLUMNS) - 1  # every column but ts
        for c, v in stored.items():
            assert v == want[c], (want["src_offset"], c, v)  # None == None: NULL stayed NULL
    nulls = client.query("SELECT countIf(isNull(ttft_s)), countIf(isNull(prefill_tps_uncached)), "
                         "countIf(isNull(stalled)), countIf(ttft_s = 0), countIf(isNaN(ttft_s)) "
                         "FROM generations").result_rows[0]
    assert nulls == (1, 3, 2, 0, 0)


def test_a_resent_batch_is_stored_once_everywhere(client):
    sink = Sink.over(client, "chdb")
    batch = [row(i) for i in range(50)]
    sink.write(batch, [])
    sink.write(batch, [])  # the retry of an insert whose reply was lost: same rows, same token
    assert int(client.command("SELECT count() FROM generations")) == 50
    for table in ("generations_minute", "generations_hour", "generations_hour3", "generations_day"):
        assert int(client.command(f"SELECT sum(n) FROM {table}")) == 50, table
    assert int(client.command("SELECT count() FROM generations_minute")) == 1  # one cell, counted once


def test_a_batch_as_columns_is_stored_as_its_rows_and_once_when_re_sent(client):
    """A batch as columns (stream_jobs/batch_decode.py) against the same rows as dicts: every
    stored value equal (ts to the millisecond, nulls null), and a retry of the
    columns (same table, same token) stored once everywhere."""
    import json
    from types import SimpleNamespace

    from phasemeter.stream_jobs.buckets import Bucketer, parse_edges
    from phasemeter.stream_jobs.batch_decode import decode

    def gen(i: int) -> dict:
        return {"schema_version": 1, "kind": "generation", "request_id": f"g{i}", "model": f"m{i % 2}",
                "t0": T0 + i * 0.0137 + 0.00049, "ttft_s": None if i % 5 == 0 else 0.25 + i / 1000,
                "e2e_s": 2.0, "input_tokens": 50 * i + 1, "output_tokens": 0 if i % 5 == 0 else i,
                **({"queue_s": 0.01} if i % 3 else {}), **({"cached_input_tokens": i} if i % 4 else {}),
                **({"finish_reason": "stop", "gateway": "gw"} if i % 2 else {})}

    records = [SimpleNamespace(message=SimpleNamespace(topic=topic, partition=p, offset=o), value=json.dumps(
        {"schema_version": 1, "kind": "batch", "events": [gen(10 * o + k) for k in range(10)]}).encode())
        for topic in ("cols", "rows") for p, o in ((0, 0), (1, 1), (0, 2))]
    bucket = Bucketer(parse_edges("default"))
    columns = decode(records[:3], bucket, 1_000_000, time.time()).gens
    as_rows = list(decode(records[3:], bucket, 1_000_000, time.time()).gens)
    assert len(columns) == len(as_rows) == 30 and isinstance(as_rows[0], dict)
    sink = Sink.over(client, "chdb")
    sink.write(columns, [])
    sink.write(columns, [])  # a retry: the same table and token
    sink.write(as_rows, [])
    cols = ", ".join(c for c in ROW_COLUMNS if c != "src_topic")
    got = {t: client.query(f"SELECT {cols}, toUnixTimestamp64Milli(ts) FROM generations WHERE src_topic = "
                           "{t:String} ORDER BY request_id", parameters={"t": t}).result_rows
           for t in ("cols", "rows")}
    assert len(got["cols"]) == 30 and got["cols"] == got["rows"]
    for table in ("generations_minute", "generations_hour", "generations_hour3", "generations_day"):
        assert int(client.command(f"SELECT sum(n) FROM {table}")) == 60, table


def dead_letter(i: int) -> dict:
    return {"ts": T0, "reason": "bad_value", "detail": f"d{i}", "payload": "", "payload_size": 0,
            "src_topic": "t", "src_partition": 0, "src_offset": 100 + i}


def count(client, table: str) -> int:
    return int(client.command(f"SELECT count() FROM {table}"))


@pytest.mark.parametrize("as_columns", [False, True])
def test_records_dropped_as_a_retry_of_an_insert_that_never_landed_are_written_again(client, as_columns):
    """What a SIGKILL inside an insert can leave: the table's deduplication
    entry for a block whose part is gone. Made here by deleting the records
    after their insert. The same records written again under their token are
    dropped (the premise); `rewrite_dropped` writes them again, once, and
    finds nothing to do after that."""
    import json
    from types import SimpleNamespace

    from phasemeter.stream_jobs.buckets import Bucketer, parse_edges
    from phasemeter.stream_jobs.batch_decode import decode

    sink = Sink.over(client, "chdb")
    if as_columns:
        records = [SimpleNamespace(message=SimpleNamespace(topic="t", partition=0, offset=o), value=json.dumps(
            {"schema_version": 1, "kind": "batch", "events": [
                {"schema_version": 1, "kind": "generation", "request_id": f"g{o}-{k}", "model": "m", "t0": T0 + o,
                 "ttft_s": 0.5, "e2e_s": 2.0, "input_tokens": 100, "output_tokens": 10} for k in range(4)]}).encode())
            for o in range(5)]
        batch = decode(records, Bucketer(parse_edges("default")), 1_000_000, time.time()).gens
    else:
        batch = [row(i) for i in range(20)]
    dead = [dead_letter(i) for i in range(3)]
    sink.write(batch, dead)
    # All of it gone, as in the chaos cell: the records to write again are
    # then the very records of the dropped insert, whose token the table holds.
    client.command("ALTER TABLE generations DELETE WHERE 1 SETTINGS mutations_sync = 1")
    client.command("ALTER TABLE dead_letters DELETE WHERE 1 SETTINGS mutations_sync = 1")
    sink.write(batch, dead)
    assert (count(client, "generations"), count(client, "dead_letters")) == (0, 0)  # dropped as a retry
    assert sink.rewrite_dropped(batch, dead) == 20 + 3
    assert (count(client, "generations"), count(client, "dead_letters")) == (20, 3)
    assert int(client.command("SELECT uniqExact(src_offset, request_id) FROM generations")) == 20
    assert sink.rewrite_dropped(batch, dead) == 0


def test_days_beyond_a_store_partition_limit_are_stored_once_everywhere_also_when_resent(client):
    """generations is partitioned by day. A batch of 300 days goes in
    inserts of at most 100 (ClickHouse's default limit per insert block), and
    a store with a lower limit is met by bisection (the refusal, Code 252,
    is deterministic); sent twice, every tier counts each row once."""
    from phasemeter.store.client import load_sql

    client.command(load_sql("set_raw_ttl"), parameters={"days": 400})  # 300 days back are kept
    rows = [row(i, ts=T0 - i * 86_400.0, src_offset=0) for i in range(300)]  # one envelope, one day each
    sink = Sink.over(client, "chdb")
    assert sink.write(rows, []) == []
    sink.insert_settings = {**Sink.insert_settings, "max_partitions_per_insert_block": 40}
    assert sink.write(rows, []) == []  # bisected inserts of the same rows: their own tokens
    assert sink.write(rows, []) == []  # a retry of them: the same tokens, dropped
    assert sink.retries == 0 and sink.last_refusal["code"] == 252
    counts = client.query("SELECT count(), uniqExact(request_id) FROM generations").result_rows[0]
    tiers = [client.query(f"SELECT sum(n) FROM {t}").result_rows[0][0]
             for t in ("generations_minute", "generations_hour", "generations_day")]
    assert counts == (600, 300)  # the bisected copy is another insert (another token), stored once itself
    assert tiers == [600, 600, 600]
