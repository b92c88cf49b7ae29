"""What Sink.write hands the client: the Arrow table built from the rows (every
value where it belongs, None as null, ts at the exact millisecond) and the
settings every insert must carry for exactly-once (the batch's token, and
deduplication in the views' target tables). No store: a recording client."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from phasemeter.stream_jobs.derive import ROW_COLUMNS
from phasemeter.stream_jobs.sink import DLQ_COLUMNS, Sink, _arrow, batch_token


def row(i: int, **over) -> dict:
    base = {c: None for c in ROW_COLUMNS}
    base.update(ts=1_764_000_000.0 + i * 0.001 + 0.0004, request_id=f"r{i}", model="m", input_bucket="0-1k",
                status="ok", finish_reason="stop", gateway="g", replica="", input_tokens=100 + i,
                output_tokens=10, queue_s=0.01, ttft_s=0.5, decode_s=1.0, e2e_s=1.5, prefill_tps=200.0,
                decode_tps=9.0, tpot_s=0.1, output_tokens_estimated=0, schema_version=1, src_topic="t",
                src_partition=i % 2, src_offset=i)
    base.update(over)
    return base


class Recorder:
    def __init__(self, fail_first: int = 0):
        self.calls: list[tuple[str, pa.Table, dict]] = []
        self.fail_first = fail_first

    def insert_arrow(self, table, arrow_table, settings=None):
        self.calls.append((table, arrow_table, dict(settings or {})))
        if len(self.calls) <= self.fail_first:
            raise ConnectionError("store away")


def test_every_value_lands_in_its_column_and_none_stays_null():
    rows = [row(0, cached_input_tokens=5, max_gap_s=0.25, stalled=1, chunks=40, gap_threshold_s=0.2),
            row(1, ttft_s=None, prefill_tps=None, decode_tps=None)]
    table = _arrow(rows, ROW_COLUMNS)
    assert table.column_names == list(ROW_COLUMNS)
    for c in ROW_COLUMNS:
        if c != "ts":
            assert table.column(c).to_pylist() == [r[c] for r in rows], c
    assert table.column("ttft_s").null_count == 1 and table.column("ttft_s").to_pylist()[1] is None
    assert table.column("prefill_tps_uncached").null_count == 2  # all None: still null, never 0 or NaN


def test_ts_is_the_exact_millisecond_in_utc():
    rows = [row(0, ts=1_764_000_000.0004), row(1, ts=1_764_000_000.0006), row(2, ts=1_764_000_000.123)]
    col = _arrow(rows, ROW_COLUMNS).column("ts")
    assert col.type == pa.timestamp("ms", tz="UTC")
    assert col.cast(pa.int64()).to_pylist() == [1_764_000_000_000, 1_764_000_000_001, 1_764_000_000_123]
    assert col.to_pylist()[2] == dt.datetime(2025, 11, 24, 16, 0, 0, 123000, tzinfo=dt.timezone.utc)


def test_dead_letters_and_a_single_column_build_too():
    dead = [{"ts": 1.0, "reason": "bad_json", "detail": "x", "payload": "ew==", "payload_size": 1,
             "src_topic": "t", "src_partition": 0, "src_offset": 3}]
    table = _arrow(dead, DLQ_COLUMNS)
    assert table.column_names == list(DLQ_COLUMNS) and table.column("payload").to_pylist() == ["ew=="]
    assert _arrow([{"a": 1}, {"a": None}], ("a",)).column("a").to_pylist() == [1, None]


def test_each_insert_sends_its_token_and_dedup_in_the_views():
    client = Recorder()
    rows = [row(i) for i in range(4)]
    Sink.over(client, "chdb").write(rows, [])
    [(table, arrow_table, settings)] = client.calls
    assert table == "generations" and arrow_table.num_rows == 4
    assert settings == {**Sink.insert_settings,
                        "insert_deduplication_token": batch_token("generations",
                                                                  [("t", i % 2, i) for i in range(4)])}
    assert settings["deduplicate_blocks_in_dependent_materialized_views"] == 1


def test_a_retried_insert_resends_the_same_rows_and_token():
    client = Recorder(fail_first=2)
    sink = Sink.over(client, "chdb")
    sink._stopping.wait = lambda backoff_s: False  # no backoff sleep: never stopped, retry at once
    sink.write([row(i) for i in range(3)], [])
    assert len(client.calls) == 3 and sink.retries == 2
    first, *_, last = client.calls
    assert first[2] == last[2] and first[1].equals(last[1])


def test_tables_are_built_outside_the_lock_and_inserted_inside_it(monkeypatch):
    import phasemeter.stream_jobs.sink as sink_module

    class LockChecking(Recorder):
        def insert_arrow(self, table, arrow_table, settings=None):
            assert sink.lock.locked()  # one statement at a time on the client
            super().insert_arrow(table, arrow_table, settings)

    def building(rows, columns):
        assert not sink.lock.locked()  # the web API's reads need not wait for Python
        return real(rows, columns)

    real = sink_module._arrow
    monkeypatch.setattr(sink_module, "_arrow", building)
    client = LockChecking()
    sink = Sink.over(client, "chdb")
    dead = [{"ts": 1.0, "reason": "bad_json", "detail": "", "payload": "", "payload_size": 0,
             "src_topic": "t", "src_partition": 0, "src_offset": 9}]
    sink.write([row(0)], dead)
    assert [c[0] for c in client.calls] == ["generations", "dead_letters"]
    assert sink.rows_written == 1 and sink.dead_written == 1


def test_a_stop_ends_a_write_retrying_on_a_store_that_is_down():
    """Sink.stop_retrying (a stopping worker past its grace): the retry loop,
    in a thread asyncio cannot cancel, raises SinkStopped at once instead of
    sleeping out its backoff and retrying for ever."""
    import threading

    from phasemeter.stream_jobs.sink import SinkStopped

    rec, outcome = Recorder(fail_first=10**9), []
    sink = Sink.over(rec, "chdb:///x")

    def write():
        try:
            sink.write([row(0)], [])
            outcome.append("written")
        except SinkStopped as exc:
            outcome.append(str(exc))

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    while len(rec.calls) < 3:  # retrying: 0.2 s, 0.4 s, then 0.8 s of backoff
        threading.Event().wait(0.01)
    sink.stop_retrying()
    writer.join(5)
    assert not writer.is_alive() and len(outcome) == 1
    assert outcome[0].startswith("store write failed: store away") and "stopped retrying" in outcome[0]
    assert sink.rows_written == 0  # not counted as written: the batch is re-read


def test_after_a_stop_a_write_the_store_accepts_still_lands():
    rec = Recorder()
    sink = Sink.over(rec, "chdb:///x")
    sink.stop_retrying()
    sink.write([row(0)], [])
    assert len(rec.calls) == 1 and sink.rows_written == 1


def test_the_duplicate_check_is_sliced_for_a_server_only():
    from phasemeter.stream_jobs import ledger

    assert Sink.over(None, "chdb:///tmp/x").crc_slice is None  # in-process parameters: no size limit
    assert Sink.over(None, "https://ch.example:8443").crc_slice == ledger.CRC_SLICE


def test_the_token_counts_every_row_of_a_record():
    """An envelope's rows share its offset: a re-read that completes a
    half-landed insert has the same offsets and fewer rows, so it must get
    another token. And the bytes hashed are one `topic/partition:offset;` per
    row in sorted order, as in every earlier version (a retry after an
    upgrade keeps its token)."""
    import hashlib

    from phasemeter.stream_jobs.sink import counted_token

    rows = [("t", 1, 7)] * 3 + [("t", 0, 9), ("s", 2, 1)]
    assert batch_token("generations", rows) != batch_token("generations", rows[1:])
    h = hashlib.sha256()
    for t, p, o in sorted(rows):
        h.update(f"{t}/{p}:{o};".encode())
    assert batch_token("generations", rows) == "generations:" + h.hexdigest()[:32]
    assert counted_token("generations", [(("t", 1, 7), 3), (("s", 2, 1), 1), (("t", 0, 9), 1)]) == \
        batch_token("generations", rows)
