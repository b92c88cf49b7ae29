"""The worker's store bookkeeping on a real chDB store: progress positions,
what a re-read range already holds, and the rollup repair after a lost
view block (the view is not atomic with its source insert)."""

from __future__ import annotations

import time
import zlib
from datetime import datetime, timedelta, timezone

import pytest
from stores import migrated_client

from phasemeter.demo.rows import synthetic_rows
from phasemeter.store import rollup
from phasemeter.store.slices import MAX_BOUND_CHARS, cell_chars, slices
from phasemeter.stream_jobs import ledger
from phasemeter.stream_jobs.buckets import Bucketer, parse_edges
from phasemeter.stream_jobs.derive import ROW_COLUMNS, process
from phasemeter.stream_jobs.sink import Sink

pytestmark = pytest.mark.integration
NOW = time.time()


@pytest.fixture
def client(tmp_path):
    with migrated_client(tmp_path, "t_ledger") as c:
        yield c


def rows(n: int, offset0: int = 0, partition: int = 0, topic: str = "gen", model: str = "m") -> list[dict]:
    bucket = Bucketer(parse_edges("default"))
    out = []
    for i in range(n):
        ev = (f'{{"schema_version":1,"kind":"generation","request_id":"{topic}-{partition}-{offset0 + i}",'
              f'"model":"{model}","t0":{NOW - 600 + i * 7},"ttft_s":0.4,"e2e_s":3.0,'
              f'"input_tokens":{100 + i * 300},"output_tokens":{1 + i % 50}}}').encode()
        row = process(ev, bucket, 1_000_000, NOW)
        row.update(src_topic=topic, src_partition=partition, src_offset=offset0 + i)
        out.append(row)
    return out


def test_positions_are_the_highest_recorded_per_partition(client):
    assert ledger.positions(client, ["gen"]) == {}
    ledger.record(client, {("gen", 0): 10, ("gen", 1): 4, ("other", 0): 99})
    ledger.record(client, {("gen", 0): 25})
    ledger.record(client, {("gen", 0): 12})  # a late writer never moves it back
    assert ledger.positions(client, ["gen"]) == {("gen", 0): 25, ("gen", 1): 4}


def test_stored_in_range_returns_rows_with_their_cells_and_dead_offsets(client):
    sink = Sink.over(client, "chdb")
    written = rows(6)
    sink.write(written, [{"ts": NOW, "reason": "bad_json", "detail": "x", "payload": "", "payload_size": 0,
                          "src_topic": "gen", "src_partition": 0, "src_offset": 9}])
    got = ledger.stored_in_range(client, "gen", 0, 2, 9)
    assert sorted(got.rows) == [(o, f"gen-0-{o}") for o in range(2, 6)]
    assert got.dead == {9}
    model, bucket, minute = got.rows[2, "gen-0-2"]
    assert (model, bucket) == ("m", written[2]["input_bucket"])
    assert minute == datetime.fromtimestamp(written[2]["ts"] // 60 * 60, timezone.utc)
    assert ledger.stored_max(client, "gen") == {0: 9}


def _rollup_total(client) -> int:
    return int(client.query("SELECT sum(n) FROM generations_minute").result_rows[0][0] or 0)


def write_with_a_lost_block(client, tier: str = "minute"):
    """The crash case: 40 rows stored through every view, then 30 (model m2)
    that raw holds but the `tier`'s view never saw. -> (the sink, those 30)."""
    sink = Sink.over(client, "chdb")
    sink.write(rows(40), [])
    client.command(f"DETACH TABLE generations_{tier}_mv")
    lost = rows(30, offset0=40, model="m2")
    sink.write(lost, [])
    client.command(f"ATTACH TABLE generations_{tier}_mv")
    return sink, lost


def one_ask(client, topics, ids, lo, hi, *args, **kwargs):
    return ledger.existing_request_ids(client, [ledger.Ask(topics, ids, lo, hi)], *args, **kwargs)[0]


@pytest.mark.parametrize("slice_size,near_share", [(ledger.CRC_SLICE, None), (3, None), (None, None),
                                                   (None, 1), (None, ledger.NEAR_SHARE)])
def test_existing_request_ids_finds_exactly_the_stored_ones(client, slice_size, near_share):
    """Any text an id may hold comes back as stored; an id whose CRC32 equals
    a stored one's ("buckeroo" and "plumless") is not reported; slices of
    the id list answer as one statement; and the same answers when the
    stored ids of the range are read and matched in the worker (near_share 1:
    the range holds 37 rows, under the 38 ids asked)."""
    tricky = ["plumless", "q'uote", "back\\slash", "tab\tnew\nline", "é😀中", "x" * 128, "{ids:String}"]
    written = rows(len(tricky) + 30)
    for row, rid in zip(written[:len(tricky)], tricky, strict=True):  # the first rows get the tricky ids
        row["request_id"] = rid
    Sink.over(client, "chdb").write(written, [])
    stored = {r["request_id"] for r in written}
    lo, hi = min(r["ts"] for r in written) - 1, max(r["ts"] for r in written) + 1
    asked = [i for i in sorted(stored)[::2] + tricky if i != "plumless"] + ["buckeroo", "never-stored", "gen-0-9"]
    assert zlib.crc32(b"buckeroo") == zlib.crc32(b"plumless")
    assert one_ask(client, ("gen",), asked, lo, hi, slice_size, near_share) == stored & set(asked)
    assert one_ask(client, ("other-topic",), asked, lo, hi, slice_size, near_share) == set()
    # A joined generation is asked about on the raw and the joined topic at once.
    both = one_ask(client, ("other-topic", "gen"), asked, lo, hi, slice_size, near_share)
    assert both == stored & set(asked)
    assert one_ask(client, ("gen",), asked, hi + 5, hi + 9, slice_size, near_share) == set()
    assert one_ask(client, ("gen",), [], lo, hi, slice_size, near_share) == set()


def test_existing_request_ids_answers_a_batch_past_the_literal_list_cliff(client):
    """30,000 ids: as a literal list this took 41 s on this store shape
    (docs/performance/sink.md); the answer must still be exact."""
    written = rows(50)
    Sink.over(client, "chdb").write(written, [])
    asked = [f"new-{i}-{'y' * 30}" for i in range(30_000)] + [r["request_id"] for r in written[::5]]
    lo, hi = min(r["ts"] for r in written) - 1, max(r["ts"] for r in written) + 1
    assert one_ask(client, ("gen",), asked, lo, hi, near_share=None) == {
        r["request_id"] for r in written[::5]}
    # The embedded store in one statement, as the sink asks it: 120,000 CRCs are
    # ~1.2 MB of text, past ClickHouse's max_query_size were they in the query.
    asked += [f"more-{i}" for i in range(90_000)]
    assert one_ask(client, ("gen",), asked, lo, hi, None, None) == {
        r["request_id"] for r in written[::5]}


def test_the_stored_ids_of_a_range_are_read_only_when_few(client, monkeypatch):
    """The check reads a range's stored ids itself when there are at most a
    quarter as many as the ids asked about, and asks by CRC32s past that;
    either way the answer is exact."""
    written = rows(40)
    Sink.over(client, "chdb").write(written, [])
    lo, hi = min(r["ts"] for r in written) - 1, max(r["ts"] for r in written) + 1
    stored = [r["request_id"] for r in written]
    asked = stored[::3] + [f"new-{i}" for i in range(160 - len(stored[::3]))]
    statements = []
    real = ledger._rows
    monkeypatch.setattr(ledger, "_rows", lambda c, name, params: statements.append(name) or real(c, name, params))
    assert one_ask(client, ("gen",), asked, lo, hi) == set(stored[::3])
    assert statements == ["request_ids_in_range"]  # 40 stored rows, 160 ids asked: 40 = a quarter
    statements.clear()
    assert one_ask(client, ("gen",), asked[:156], lo, hi) == set(stored[::3])
    assert statements == ["request_ids_in_range", "existing_request_ids"]  # 40 > 156 // 4


def test_one_read_answers_every_scope_of_a_batch_each_on_its_own_topics_and_range(client, monkeypatch):
    """A batch of raw and joined records asks twice over nearly one range (the joined scope on both topics): one
    read of the stored rows answers both when it holds at most a quarter of all their ids, each ask matched to its
    own topics and its own range, to the millisecond; past that, each ask alone, with the same answers."""
    raw, joined = rows(40), rows(40, topic="gen.joined")  # pairwise the same ts
    Sink.over(client, "chdb").write(raw + joined, [])
    ts = sorted(r["ts"] for r in raw + joined)
    lo, mid, hi = ts[0], ts[40], ts[-1]
    asks = [ledger.Ask(("gen", "gen.joined"), [r["request_id"] for r in joined] + [f"new-{i}" for i in range(300)],
                       mid, hi),
            ledger.Ask(("gen",), [r["request_id"] for r in raw + joined] + [f"new-{i}" for i in range(300)], lo, mid)]
    want = [{r["request_id"] for r in joined if mid <= r["ts"]},
            {r["request_id"] for r in raw if r["ts"] <= mid}]
    assert all(want) and want[1] != {r["request_id"] for r in raw}  # each range leaves some rows out
    statements = []
    real = ledger._rows
    monkeypatch.setattr(ledger, "_rows", lambda c, name, params: statements.append(name) or real(c, name, params))
    assert ledger.existing_request_ids(client, asks) == want
    assert statements == ["request_ids_in_range"]  # 80 stored rows in the whole range, 760 ids asked
    statements.clear()  # past the whole range's limit, each ask alone: the raw one still reads its own range
    assert ledger.existing_request_ids(client, asks, None, 10) == want
    assert statements == ["request_ids_in_range",  # 80 stored rows > 760 // 10
                          "request_ids_in_range", "existing_request_ids",  # 40 in its range, both topics > 340 // 10
                          "request_ids_in_range"]  # 21 on the raw topic in its range <= 420 // 10
    assert ledger.existing_request_ids(client, []) == []


# 40 characters: one or two cells per statement, as a server's bound-value
# limit would cut the cells of a very wide re-read (store/slices.py).
@pytest.mark.parametrize("limit", [MAX_BOUND_CHARS, 40])
def test_repair_fills_cells_whose_view_block_was_lost(client, limit):
    _, lost = write_with_a_lost_block(client)
    window = (datetime(2000, 1, 1, tzinfo=timezone.utc), datetime(2100, 1, 1, tzinfo=timezone.utc))
    bad = rollup.mismatches(client, *window)
    assert bad and all(raw > roll == 0 for _, _, _, raw, roll in bad)
    cells = _cells_of(lost)
    assert limit == MAX_BOUND_CHARS or len(list(slices(sorted(cells), cell_chars, limit))) >= len(cells) // 2 > 1
    repaired = rollup.repair_cells(client, cells, limit=limit)
    # A rebuild fills every cell its time range lacks, so a later slice may
    # find its cells already mended: each one is reported at most once.
    assert {r[1:] for r in repaired} <= set(bad) and len(repaired) == len({r[1:] for r in repaired})
    assert len(repaired) == len(bad) or limit < MAX_BOUND_CHARS
    assert rollup.mismatches(client, *window) == [] and _rollup_total(client) == 70
    # Idempotent: checking again changes nothing.
    assert rollup.repair_cells(client, cells, limit=limit) == [] and _rollup_total(client) == 70


def test_repair_also_fixes_a_doubled_cell_and_keeps_the_exact_tails(client):
    sink = Sink.over(client, "chdb")
    batch = rows(25)
    sink.write(batch, [])
    before = client.query("SELECT model, input_bucket, minute, finalizeAggregation(prefill_lo) "
                          "FROM (SELECT model, input_bucket, minute, groupArraySortedMergeState(16)(prefill_lo) "
                          "AS prefill_lo FROM generations_minute GROUP BY model, input_bucket, minute) "
                          "ORDER BY 1, 2, 3").result_rows
    # A view block counted twice (e.g. a retry that the dedup window missed).
    client.command("INSERT INTO generations_minute SELECT * FROM generations_minute",
                   settings={"insert_deduplicate": 0})
    cells = {(m, b, t) for m, b, t, _ in before}
    assert len(rollup.repair_cells(client, cells)) == len(cells)
    after = client.query("SELECT model, input_bucket, minute, finalizeAggregation(prefill_lo) "
                         "FROM (SELECT model, input_bucket, minute, groupArraySortedMergeState(16)(prefill_lo) "
                         "AS prefill_lo FROM generations_minute GROUP BY model, input_bucket, minute) "
                         "ORDER BY 1, 2, 3").result_rows
    assert after == before and _rollup_total(client) == 25


WINDOW = (datetime(2000, 1, 1, tzinfo=timezone.utc), datetime(2100, 1, 1, tzinfo=timezone.utc))


def _tier_totals(client) -> dict[str, int]:
    return {t: int(client.query(f"SELECT sum(n) FROM generations_{t}").result_rows[0][0] or 0)
            for t in ("minute", "hour", "hour3", "day")}


def _cells_of(batch) -> set:
    return {(r["model"], r["input_bucket"], datetime.fromtimestamp(r["ts"] // 60 * 60, timezone.utc)) for r in batch}


@pytest.mark.parametrize("tier", ["hour", "hour3", "day"])
def test_repair_finds_and_rebuilds_a_coarse_tier_cut_by_a_crash(client, tier):
    # Each tier has its own view off `generations`: a crash can cut any one.
    _, lost = write_with_a_lost_block(client, tier)
    assert _tier_totals(client) == {"minute": 70, "hour": 70, "hour3": 70, "day": 70} | {tier: 40}
    bad = ledger.all_tier_mismatches(client, *WINDOW)
    assert bad and {b[0] for b in bad} == {tier} and all(raw > roll == 0 for *_, raw, roll in bad)
    repaired = rollup.repair_cells(client, _cells_of(lost))
    assert sorted(repaired) == sorted(bad)
    assert ledger.all_tier_mismatches(client, *WINDOW) == [] and _tier_totals(client) == dict.fromkeys(_tier_totals(client), 70)
    assert rollup.repair_cells(client, _cells_of(lost)) == []  # idempotent


def test_rebuilding_a_minute_cell_does_not_count_again_in_the_coarser_tiers(client):
    # The reason no tier is fed from another: a minute cell deleted and rebuilt
    # from raw must leave the coarser tiers as they were (equal to raw).
    _, lost = write_with_a_lost_block(client)
    repaired = rollup.repair_cells(client, _cells_of(lost))
    assert repaired and {r[0] for r in repaired} == {"minute"}
    assert _tier_totals(client) == {"minute": 70, "hour": 70, "hour3": 70, "day": 70}
    assert ledger.all_tier_mismatches(client, *WINDOW) == []


def test_repair_fixes_a_doubled_day_cell_and_keeps_its_states(client):
    Sink.over(client, "chdb").write(rows(25), [])
    q = ("SELECT model, input_bucket, minute, finalizeAggregation(lo), finalizeAggregation(hi) FROM "
         "(SELECT model, input_bucket, minute, groupArraySortedMergeState(16)(prefill_lo) AS lo, "
         "groupArraySortedMergeState(16)(ttft_hi) AS hi FROM generations_day GROUP BY ALL) ORDER BY 1, 2, 3")
    before = client.query(q).result_rows
    client.command("INSERT INTO generations_day SELECT * FROM generations_day", settings={"insert_deduplicate": 0})
    assert _tier_totals(client)["day"] == 50
    found = rollup.repair_cells(client, _cells_of(rows(25)))
    assert found and {f[0] for f in found} == {"day"} and all(roll == 2 * raw for *_, raw, roll in found)
    assert client.query(q).result_rows == before and _tier_totals(client)["day"] == 25


# Yesterday's midnight UTC: rows two hours either side of it fill cells of
# two days, two 3-hour blocks and four hours.
MIDNIGHT = datetime.fromtimestamp((NOW // 86400 - 1) * 86400, timezone.utc)


def _around_midnight(n: int, seed: int, offset0: int = 0) -> list[dict]:
    return synthetic_rows(n, MIDNIGHT.timestamp() - 7200, 4 * 3600, seed=seed, topic="gen", first_offset=offset0)


def _tier_by_tier(client, cells) -> list[tuple]:
    """What the repair asked before the all-tier statement: each tier with
    sql/rollup_mismatches.sql on the cells the minute cells fall in."""
    out = []
    for tier in rollup.TIERS:
        mine = {(m, b, tier.floor(t)) for m, b, t in cells}
        start, end = min(t for *_, t in mine), max(t for *_, t in mine) + timedelta(seconds=tier.grain_s)
        out += [(tier.name, *bad) for bad in rollup.mismatches(client, start, end, mine, tier)]
    return out


def _delete_cells(client, tier: str, cells) -> None:
    client.command(f"DELETE FROM generations_{tier} WHERE (model, input_bucket, minute) "
                   "IN {cells:Array(Tuple(String, String, DateTime))}",
                   parameters={"cells": [(m, b, t.replace(tzinfo=None)) for m, b, t in cells]},
                   settings={"lightweight_deletes_sync": 2})


def test_the_all_tier_check_finds_what_each_tier_s_own_check_finds(client):
    sink = Sink.over(client, "chdb")
    first = _around_midnight(1500, seed=21)
    sink.write(first, [])
    assert rollup.tier_mismatches(client, _cells_of(first)) == []  # all equal
    client.command("DETACH TABLE generations_hour3_mv")  # raw rows the 3-hour tier never saw
    later = _around_midnight(40, seed=22, offset0=5000)
    sink.write(later, [])
    client.command("ATTACH TABLE generations_hour3_mv")
    cells = _cells_of(first + later)
    at_midnight = sorted(c for c in cells if c[2] in (MIDNIGHT - timedelta(minutes=1), MIDNIGHT))
    _delete_cells(client, "minute", at_midnight[::2])  # states deleted, either side of midnight
    before = (MIDNIGHT - timedelta(hours=1)).replace(tzinfo=None)
    client.command("INSERT INTO generations_hour SELECT * FROM generations_hour WHERE minute = {h:DateTime}",
                   parameters={"h": before}, settings={"insert_deduplicate": 0})  # cells doubled
    model, bucket, _ = at_midnight[0]
    _delete_cells(client, "day", [(model, bucket, MIDNIGHT)])
    everywhere = _tier_by_tier(client, cells)
    assert {bad[0] for bad in everywhere} == {"minute", "hour", "hour3", "day"}
    assert rollup.tier_mismatches(client, cells) == everywhere
    far_from_midnight = {min(cells, key=lambda c: c[2]), max(cells, key=lambda c: c[2])}
    one_pair = {c for c in cells if c[:2] == (model, bucket)}
    for some in (set(at_midnight), set(at_midnight[1::2]), far_from_midnight, one_pair,
                 {(model, bucket, MIDNIGHT + timedelta(days=3))}):  # a minute without rows
        assert rollup.tier_mismatches(client, some) == _tier_by_tier(client, some)
    assert {t < MIDNIGHT for *_, t, _, _ in rollup.tier_mismatches(client, set(at_midnight))} == {True, False}
    assert {r[0] for r in rollup.repair_cells(client, cells)} == {"minute", "hour", "hour3", "day"}
    assert rollup.tier_mismatches(client, cells) == []
    assert _tier_by_tier(client, cells) == [] and ledger.all_tier_mismatches(client, *WINDOW) == []


@pytest.mark.parametrize("tier", ["minute", "hour", "hour3", "day"])
def test_the_all_tier_check_sees_damage_in_any_one_tier(client, tier):
    written = _around_midnight(300, seed=23)
    Sink.over(client, "chdb").write(written, [])
    cells = _cells_of(written)
    model, bucket, last = max(cells, key=lambda c: c[2])
    cell = {t.name: t for t in rollup.TIERS}[tier].floor(last).replace(tzinfo=timezone.utc)
    _delete_cells(client, tier, [(model, bucket, cell)])
    [found] = rollup.tier_mismatches(client, cells)
    assert found[:4] == (tier, model, bucket, cell) and found[4] > found[5] == 0
    assert [r[:4] for r in rollup.repair_cells(client, cells)] == [found[:4]]
    assert rollup.tier_mismatches(client, cells) == [] and rollup.repair_cells(client, cells) == []


def test_batch_token_depends_on_every_offset_not_only_the_span():
    from phasemeter.stream_jobs.sink import batch_token

    full = [("gen", 0, o) for o in range(100, 201)]
    part = [("gen", 0, o) for o in range(100, 201) if o % 2 == 0]
    assert batch_token("generations", full) == batch_token("generations", list(reversed(full)))
    assert batch_token("generations", full) != batch_token("generations", part)
    assert ROW_COLUMNS  # the sink writes these columns
