"""What Sink.write hands the client: the Arrow table built from the rows (every
value where it belongs, None as null, ts at the exact millisecond) and the
settings every insert must carry for exactly-once (the batch's token, and
deduplication in the views' target tables). No store: a recording client."""

from __future__ import annotations

import datetime as dt

import numpy as np
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


def test_after_a_stop_a_write_the_store_accepts_still_lands():
    rec = Recorder()
    sink = Sink.over(rec, "chdb:///x")
    sink.stop_retrying()
    sink.write([row(0)], [])
    assert len(rec.calls) == 1


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


DAY = 86_400.0


class Refusing(Recorder):
    """Refuses, as the store does for good, any insert holding a row whose
    request_id starts with "bad" (Code 53), and any of more than `days`
    partitions (Code 252); both before anything lands."""

    def __init__(self, days: int = 100, transient_first: int = 0):
        super().__init__()
        self.days, self.transient_first, self.landed = days, transient_first, []

    def insert_arrow(self, table, arrow_table, settings=None):
        self.calls.append((table, arrow_table, dict(settings or {})))
        if self.transient_first:
            self.transient_first -= 1
            raise ConnectionError("store away")
        if table == "generations":
            ids = arrow_table.column("request_id").to_pylist()
            if any(i.startswith("bad") for i in ids):
                raise RuntimeError("Code: 53. DB::Exception: Type mismatch (TYPE_MISMATCH)")
            days = {t.date() for t in arrow_table.column("ts").to_pylist()}
            if len(days) > self.days:
                raise RuntimeError("Code: 252. DB::Exception: Too many partitions for single INSERT block "
                                   f"(more than {self.days}). (TOO_MANY_PARTS)")
        self.landed.append((table, arrow_table, settings["insert_deduplication_token"]))


def daily_rows(n: int, bad: set[int] = frozenset(), per_offset: int = 1) -> list[dict]:
    return [row(i, ts=1_764_000_000.0 - i * DAY, request_id=("bad" if i in bad else "r") + str(i),
                src_partition=0, src_offset=i // per_offset) for i in range(n)]


def test_a_batch_of_300_days_is_written_in_inserts_of_at_most_100_days_with_tokens_of_their_own():
    rows = daily_rows(300, per_offset=300)  # one envelope: every row at one offset
    client = Refusing()
    assert Sink.over(client, "chdb").write(rows, []) == []
    assert len(client.landed) == 3 and len(client.calls) == 3
    assert [t.num_rows for _, t, _ in client.landed] == [100, 100, 100]
    tokens = [token for _, _, token in client.landed]
    assert len(set(tokens)) == 3  # the same offsets in each: numbered, or a group would be dropped as a retry
    again = Refusing()
    Sink.over(again, "chdb").write(list(rows), [])
    assert [token for _, _, token in again.landed] == tokens  # the same batch, the same inserts and tokens


def test_a_row_the_store_refuses_for_good_is_isolated_and_dead_lettered_and_the_rest_stored():
    rows = daily_rows(40, bad={5, 33})
    dead = [{"ts": 1.0, "reason": "not_utf8", "detail": "", "payload": "", "payload_size": 3,
             "src_topic": "t", "src_partition": 0, "src_offset": 99}]
    client = Refusing()
    sink = Sink.over(client, "chdb")
    refused = sink.write(rows, dead)
    assert len(refused) == 2
    assert [(d["reason"], d["src_offset"]) for d in refused] == [("store_refused", 5), ("store_refused", 33)]
    assert all("code 53" in d["detail"] and "Type mismatch" in d["detail"] for d in refused)
    landed = [r for table, t, _ in client.landed if table == "generations" for r in t.column("request_id").to_pylist()]
    assert sorted(landed) == sorted(f"r{i}" for i in range(40) if i not in (5, 33))
    [dead_insert] = [t for table, t, _ in client.landed if table == "dead_letters"]
    assert dead_insert.column("src_offset").to_pylist() == [99, 5, 33]
    assert sink.store_refused == 2
    assert sink.retries == 0  # a deterministic refusal is never retried as such
    assert sink.store_error is None  # facing nothing now; the refusal stays visible
    assert (sink.last_refusal["kind"], sink.last_refusal["code"]) == ("deterministic", 53)
    tokens = [tok for table, _, tok in client.landed if table == "generations"]
    assert len(tokens) == len(set(tokens))


def test_a_transient_error_is_still_retried_with_the_same_insert():
    client = Refusing(transient_first=2)
    sink = Sink.over(client, "chdb")
    facing = []
    sink._stopping.wait = lambda backoff_s: facing.append(dict(sink.store_error)) and False
    assert sink.write(daily_rows(3), []) == []
    assert facing == [{"kind": "transient", "code": None, "during": "store write"}] * 2  # what /health says
    assert sink.store_error is None
    client = Refusing(transient_first=2)
    sink = Sink.over(client, "chdb")
    sink._stopping.wait = lambda backoff_s: False
    assert sink.write(daily_rows(3), []) == []
    assert sink.retries == 2 and len(client.landed) == 1 and sink.last_refusal is None
    assert client.calls[0][2] == client.calls[-1][2]


def test_a_lower_partition_limit_of_a_server_is_met_by_bisection():
    client = Refusing(days=30)
    assert Sink.over(client, "chdb").write(daily_rows(100), []) == []
    assert sum(t.num_rows for _, t, _ in client.landed) == 100
    assert len(client.landed) == 4  # 100 days: refused, then halves of 50 (refused), then quarters of 25
    days_per_insert = [len({x.date() for x in t.column("ts").to_pylist()}) for _, t, _ in client.landed]
    assert max(days_per_insert) <= 30  # the server's limit on partitions (days) per insert


def test_columns_are_grouped_and_bisected_like_rows():
    from phasemeter.stream_jobs.columnar import Generations

    rows = daily_rows(250, bad={200})
    gens = Generations({c: pa.array([r[c] for r in rows]) for c in ROW_COLUMNS if c != "ts"},
                       np.array([r["ts"] for r in rows]), [r["request_id"] for r in rows],
                       [("t", 0, i) for i in range(250)], [1] * 250)
    as_columns, as_rows = Refusing(), Refusing()
    refused = Sink.over(as_columns, "chdb").write(gens, [])
    assert [d["src_offset"] for d in refused] == [200]
    assert Sink.over(as_rows, "chdb").write(rows, [])[0]["src_offset"] == 200
    assert [(t.num_rows, tok) for _, t, tok in as_columns.landed] == [(t.num_rows, tok) for _, t, tok in as_rows.landed]


def test_a_value_arrow_cannot_take_is_isolated_like_a_store_refusal():
    rows = daily_rows(8)
    rows[3]["input_tokens"] = 10**30  # past int64: the column fails to build, alone too
    client = Refusing()
    refused = Sink.over(client, "chdb").write(rows, [])
    assert [(d["reason"], d["src_offset"]) for d in refused] == [("store_refused", 3)]
    assert sum(t.num_rows for table, t, _ in client.landed if table == "generations") == 7
