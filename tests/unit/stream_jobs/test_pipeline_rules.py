"""Pipeline.split's exactly-once rules over a fake sink: what a re-read
batch may write again, what it must skip, and which rollup cells it hands
over for a check. These rules are the worker's exactly-once logic."""

from __future__ import annotations

import base64
import json
import time
from datetime import datetime, timezone
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phasemeter.settings import Settings
from phasemeter.stream_jobs import reasons as R
from phasemeter.stream_jobs import batch_decode, dead_letter
from phasemeter.stream_jobs.batch_decode import Ahead
from phasemeter.stream_jobs.columnar import Generations
from phasemeter.stream_jobs.contract import MAX_DURATION_S, oldest_kept
from phasemeter.stream_jobs.derive import process_message
from phasemeter.stream_jobs.ledger import Stored
from phasemeter.stream_jobs import pipeline as pipeline_module
from phasemeter.stream_jobs.pipeline import Pipeline

# A whole minute ten days ago: in the past (a t0 after now+1d is rejected)
# and inside the raw retention (a t0 older than PHASEMETER_RAW_TTL_DAYS is too).
T0 = time.time() // 60 * 60 - 10 * 86_400
TOPIC = "gen"


class FakeSink:
    """What the store holds: rows by (topic, partition, offset, request_id)
    with their cell, dead letters by (topic, partition, offset)."""

    def __init__(self, rows=(), dead=(), ids=(), dups=()):
        self.rows = {r[:4]: r[4] for r in rows}
        self.dead = set(dead)
        self.dups = list(dups)  # (topic, partition, offset, request_id) of each duplicate dead letter
        self.ids = set(ids)
        self.range_queries = []
        self.id_queries = []

    def stored_max(self, topic):
        out = {}
        for t, p, o in [k[:3] for k in self.rows] + list(self.dead):
            if t == topic:
                out[p] = max(out.get(p, -1), o)
        return out

    def stored_in_range(self, topic, partition, lo, hi) -> Stored:
        into = Stored()
        self.range_queries.append((topic, partition, lo, hi))
        for (t, p, o, rid), cell in self.rows.items():
            if (t, p) == (topic, partition) and lo <= o <= hi:
                into.rows[o, rid] = cell
        into.dead |= {o for t, p, o in self.dead if (t, p) == (topic, partition) and lo <= o <= hi}
        into.duplicates.update((o, dead_letter.duplicate_detail(rid)) for t, p, o, rid in self.dups
                               if (t, p) == (topic, partition) and lo <= o <= hi)
        return into

    def label_values(self):
        return [("replica", "m", "seeded-0")]

    def existing_request_ids(self, asks):
        """`ids` holds request_ids stored from any topic, or (topic, request_id)."""
        self.id_queries += [tuple(a.topics) for a in asks]
        return [{i for i in a.ids if i in self.ids or any((t, i) in self.ids for t in a.topics)} for a in asks]


def gen(rid: str, t0: float = T0, model: str = "m") -> dict:
    return {"schema_version": 1, "kind": "generation", "request_id": rid, "model": model, "t0": t0,
            "ttft_s": 0.5, "e2e_s": 2.0, "input_tokens": 1000, "output_tokens": 50}


def rec(offset: int, value, partition: int = 0, topic: str = TOPIC):
    data = value if isinstance(value, bytes) else json.dumps(value).encode()
    return SimpleNamespace(message=SimpleNamespace(topic=topic, partition=partition, offset=offset, timestamp=T0),
                           value=data)


def env(*events, version: int = 2) -> dict:
    """An envelope of `events` (producers/envelopes.py's shape)."""
    return {"schema_version": version, "kind": "batch", "events": list(events)}


def pipeline(sink) -> Pipeline:
    return Pipeline(Settings(topic=TOPIC), sink)


def cell(t0: float) -> tuple:
    """The minute cell of gen(..., t0=t0)."""
    return ("m", "512-2k", datetime.fromtimestamp(t0 // 60 * 60, timezone.utc))


CELL = cell(T0)


def test_new_records_are_all_written_and_nothing_is_queried_per_record():
    sink = FakeSink()
    p = Pipeline(Settings(topic=TOPIC, batch_rows=5), sink)
    p.split([rec(i, gen(f"r{i}")) for i in range(5)])  # the first batch_rows after the start: checked (below)
    rows, dead, phases, suspects = p.split([rec(i, gen(f"r{i}")) for i in range(5, 10)])
    assert [r["request_id"] for r in rows] == [f"r{i}" for i in range(5, 10)]
    assert (dead, phases, suspects) == ([], [], set())
    assert sink.range_queries == []  # above the stored maximum: no exact lookup


def test_rows_the_previous_owner_may_have_been_writing_are_checked_after_the_write():
    # A kill can leave a batch's view blocks committed and its raw part not:
    # its rows look new when re-read, so the cells of the first batch_rows
    # records after the position this owner resumed from are checked too.
    p = Pipeline(Settings(topic=TOPIC, batch_rows=3), FakeSink())
    batch = [rec(o, gen(f"r{o}", t0=T0 + 60 * o)) for o in range(10, 16)]
    rows, _, _, suspects = p.split(batch[:2])
    assert len(rows) == 2 and suspects == {cell(T0 + 600), cell(T0 + 660)}
    rows, _, _, suspects = p.split(batch[2:])  # the window is counted from offset 10, not per batch
    assert len(rows) == 4 and suspects == {cell(T0 + 720)}
    other = rec(40, gen("q0", t0=T0), partition=1)  # each partition from where it resumed
    assert p.split([other])[3] == {cell(T0)}
    p.forget_offsets()  # a rebalance: another owner may have been writing since
    rows, _, _, suspects = p.split([rec(16, gen("r16", t0=T0 + 960))])
    assert len(rows) == 1 and suspects == {cell(T0 + 960)}


def test_records_produced_after_the_owner_took_the_partition_are_not_checked():
    # The previous owner had stopped fetching when this one read the log's
    # end: its last batch held only records below that end offset.
    p = Pipeline(Settings(topic=TOPIC, batch_rows=1000), FakeSink())
    p.bound_rereads({(TOPIC, 0): 12})
    batch = [rec(o, gen(f"r{o}", t0=T0 + 60 * o)) for o in range(10, 15)]
    assert p.split(batch)[3] == {cell(T0 + 600), cell(T0 + 660)}
    assert p.split([rec(40, gen("q0", t0=T0), partition=1)])[3] == {cell(T0)}  # no end read: the batch bounds
    p.forget_offsets()  # a rebalance: the end read before it no longer bounds anything
    assert p.split([rec(15, gen("r15", t0=T0 + 900))])[3] == {cell(T0 + 900)}


def test_each_split_counts_the_records_the_previous_owner_may_have_written():
    """`reread_records`, on which the agent asks the store whether every
    record of the batch landed (Sink.rewrite_dropped): the window's records
    of this split only, dead letters' records included, whatever the path."""
    p = Pipeline(Settings(topic=TOPIC, batch_rows=1000), FakeSink())
    p.bound_rereads({(TOPIC, 0): 12})
    assert p.split([rec(10, gen("r10", t0=T0)), rec(11, b"{")])[3] and p.reread_records == 2  # with a dead letter
    assert p.split([rec(12, gen("r12", t0=T0))])[0] and p.reread_records == 0  # past the end read
    p.forget_offsets()
    p.bound_rereads({(TOPIC, 0): 30})
    assert isinstance(p.split([rec(o, env(gen(f"e{o}", t0=T0))) for o in (20, 21)])[0], Generations)
    assert p.reread_records == 2  # envelopes


def test_the_previous_batch_is_bounded_by_bytes_too():
    # A batch ends at the record that reaches batch_bytes (stream_jobs/batching.gather),
    # so with envelopes the window is a few records, not batch_rows of them.
    one = len(rec(0, gen("x")).value)
    p = Pipeline(Settings(topic=TOPIC, batch_rows=1000, batch_bytes=2 * one), FakeSink())
    batch = [rec(o, gen(f"r{o}", t0=T0 + 60 * o)) for o in range(4)]
    assert p.split(batch)[3] == {cell(T0), cell(T0 + 60)}  # the second record crosses the bound: the last one


def test_a_re_read_row_is_skipped_and_its_cell_is_handed_over_for_the_rollup_check():
    sink = FakeSink(rows=[(TOPIC, 0, 0, "r0", CELL), (TOPIC, 0, 1, "r1", CELL)])
    p = pipeline(sink)
    rows, dead, _, suspects = p.split([rec(i, gen(f"r{i}")) for i in range(4)])
    assert [r["request_id"] for r in rows] == ["r2", "r3"]
    assert suspects == {CELL} and p.counts["skipped_redelivered"] == 2 and dead == []
    assert sink.range_queries == [(TOPIC, 0, 0, 1)]


def test_an_envelope_half_stored_writes_only_its_missing_rows():
    # One record, three generations; a crash left two of them stored (their
    # day partition's part landed, the other's did not).
    envelope = env(gen("a"), gen("b", t0=T0 + 86_400), gen("c"), version=1)
    sink = FakeSink(rows=[(TOPIC, 0, 7, "a", CELL), (TOPIC, 0, 7, "c", CELL)])
    rows, _, _, suspects = pipeline(sink).split([rec(7, envelope)])
    # b's cell too: a record right after the resume position (the test below)
    assert [r["request_id"] for r in rows] == ["b"] and suspects == {CELL, cell(T0 + 86_400)}


def test_a_record_whose_rows_landed_but_not_its_dead_letters_gets_its_dead_letters():
    # A crash between the two inserts: generations held, dead_letters not.
    envelope = env(gen("a"), {"kind": "generation"}, version=1)
    sink = FakeSink(rows=[(TOPIC, 0, 3, "a", CELL)])
    rows, dead, _, _ = pipeline(sink).split([rec(3, envelope)])
    assert rows == [] and [d["src_offset"] for d in dead] == [3]


def test_dead_letters_already_stored_are_not_written_twice():
    sink = FakeSink(dead=[(TOPIC, 0, 0)])
    rows, dead, _, _ = pipeline(sink).split([rec(0, b"not json"), rec(1, b"{")])
    assert rows == [] and [d["src_offset"] for d in dead] == [1]


def test_a_gateway_duplicate_is_dead_lettered_and_stays_so_on_a_re_read():
    sink = FakeSink(ids={"r1"})
    rows, dead, _, _ = pipeline(sink).split([rec(0, gen("r0")), rec(1, gen("r1"))])
    assert [r["request_id"] for r in rows] == ["r0"]
    assert [(d["reason"], d["src_offset"]) for d in dead] == [(R.DUPLICATE, 1)]
    # After a crash: r0 stored at offset 0, the duplicate's dead letter at 1.
    sink = FakeSink(rows=[(TOPIC, 0, 0, "r0", CELL)], dead=[(TOPIC, 0, 1)], ids={"r0", "r1"})
    rows, dead, _, _ = pipeline(sink).split([rec(0, gen("r0")), rec(1, gen("r1"))])
    assert (rows, dead) == ([], [])


def test_the_same_request_twice_in_one_batch_keeps_the_first():
    rows, dead, _, _ = pipeline(FakeSink()).split([rec(0, gen("x")), rec(1, gen("x"))])
    assert [r["src_offset"] for r in rows] == [0] and [d["reason"] for d in dead] == [R.DUPLICATE]


def test_a_re_read_duplicate_the_store_holds_as_a_dead_letter_stays_one_whatever_the_batch_sees():
    """A copy dead-lettered as a duplicate, re-read after a crash in a batch whose time range does not reach its
    first copy: skipped, not stored. A request_id with a copy in the record not dead-lettered goes through the
    rules: that copy's row may be what the crash lost (an insert's deduplication entry without its part)."""
    p = pipeline(FakeSink(dead=[(TOPIC, 0, 1)], dups=[(TOPIC, 0, 1, "a")]))
    rows, dead = p.split([rec(0, gen("b")), rec(1, gen("a"))])[:2]
    assert ([r["request_id"] for r in rows], dead, p.counts["skipped_redelivered"], p.counts["duplicates"]) == \
        (["b"], [], 1, 0)
    p = pipeline(FakeSink(dead=[(TOPIC, 0, 1)], dups=[(TOPIC, 0, 1, "a")]))
    rows, dead = p.split([rec(1, env(gen("a"), gen("a", t0=T0 + 1)))])[:2]
    assert ([(r["request_id"], r["t0"]) for r in rows], dead, p.counts["skipped_redelivered"]) == ([("a", T0)], [], 1)


def test_a_re_read_row_the_store_holds_makes_its_later_copies_duplicates_whatever_the_batch_sees():
    """The rows landed and the dead letters did not: the store holds one row per record and request_id, the
    first copy's, so a later copy in the record is still a duplicate, dead-lettered; and so is a copy in
    another record of the batch, though the batch's time range without the skipped rows misses the first."""
    p = pipeline(FakeSink(rows=[(TOPIC, 0, 1, "a", CELL)]))
    rows, dead = p.split([rec(1, env(gen("a"), gen("a", t0=T0 + 1)))])[:2]
    assert (len(rows), [(d["reason"], d["src_offset"]) for d in dead], p.counts["skipped_redelivered"]) == \
        (0, [(R.DUPLICATE, 1)], 1)
    p = pipeline(FakeSink(rows=[(TOPIC, 0, 0, "a", CELL)]))
    rows, dead = p.split([rec(0, gen("a")), rec(1, gen("b", t0=T0 + 7200)), rec(2, gen("a", t0=T0 + 7200))])[:2]
    assert ([r["request_id"] for r in rows], [(d["reason"], d["src_offset"]) for d in dead]) == (
        ["b"], [(R.DUPLICATE, 2)])


def test_a_rejoined_generation_on_the_joined_topic_is_dropped_not_dead_lettered():
    s = Settings(topic=TOPIC)
    sink = FakeSink(ids={"j"})
    p = Pipeline(s, sink)
    envelope = env(dict(gen("j"), schema_version=2))
    rows, dead, _, _ = p.split([rec(0, envelope, topic=s.joined_topic_name)])
    assert (rows, dead, p.counts["rejoined_dropped"]) == ([], [], 1)


def test_stored_maximum_is_re_read_after_a_rebalance():
    sink = FakeSink()
    p = pipeline(sink)
    p.split([rec(0, gen("a"))])
    sink.rows[(TOPIC, 0, 5, "z")] = CELL  # another worker stored up to 5 meanwhile
    p.forget_offsets()
    rows, _, _, suspects = p.split([rec(5, gen("z"))])
    assert rows == [] and suspects == {CELL}


def test_every_batch_goes_as_columns_bad_duplicate_re_read_mixed_phases_or_otlp():
    """stream_jobs/batch_decode.py takes every batch, from every topic: a bad
    event is dead-lettered beside its good neighbours, duplicates, re-reads
    and re-joins follow the rules the tests above hold, and a phase, a
    record the join gave up on and an OTLP span ride in the same batch."""
    envelope = env(gen("b"), gen("c"), version=1)
    rows = pipeline(FakeSink()).split([rec(0, gen("a")), rec(1, envelope)])[0]
    assert isinstance(rows, Generations) and [r["request_id"] for r in rows] == ["a", "b", "c"]
    s = Settings(topic=TOPIC, otlp_topic="gen.otlp")
    phase = {"schema_version": 2, "kind": "start", "request_id": "p", "model": "m", "t0": T0, "input_tokens": 5}
    cases = {  # why: (sink, batch, request_ids stored, reasons dead-lettered)
        "a request twice": (FakeSink(), [rec(0, gen("a")), rec(1, gen("a"))], ["a"], [R.DUPLICATE]),
        "a request stored": (FakeSink(ids={"a"}), [rec(0, gen("a")), rec(1, gen("b"))], ["b"], [R.DUPLICATE]),
        "a re-read": (FakeSink(rows=[(TOPIC, 0, 0, "z", CELL)]), [rec(0, gen("a")), rec(1, gen("b"))],
                      ["a", "b"], []),
        "a bad event": (FakeSink(), [rec(0, gen("a")), rec(1, {"kind": "generation"})], ["a"], [R.UNKNOWN_VERSION]),
        "a bad event in an envelope": (FakeSink(), [rec(0, env(gen("a"), dict(gen("b"), ttft_s=-1), version=1))],
                                       ["a"], [R.IMPOSSIBLE_ORDER]),
        "two topics": (FakeSink(), [rec(0, gen("a")), rec(0, gen("b"), topic=s.joined_topic_name)], ["a", "b"], []),
        "a re-joined generation": (FakeSink(ids={"a"}), [rec(0, gen("a"), topic=s.joined_topic_name),
                                                         rec(1, gen("b"), topic=s.joined_topic_name)], ["b"], []),
        "a phase": (FakeSink(), [rec(0, gen("a")), rec(1, phase)], ["a"], []),
        "a generation the join gave up on": (FakeSink(), [rec(0, dict(gen("a"), status="abandoned"),
                                                              topic=s.joined_topic_name)], ["a"], []),
        "the OTLP topic": (FakeSink(), [rec(0, gen("a")), rec(0, b"{}", topic=s.otlp_topic)], ["a"], []),
    }
    assert len(cases) == 10
    for why, (sink, batch, stored, reasons) in cases.items():
        p = Pipeline(s, sink)
        rows, dead, phases = p.split(batch)[:3]
        assert isinstance(rows, Generations) or stored == [], why
        assert ([r["request_id"] for r in rows], [d["reason"] for d in dead]) == (stored, reasons), why
        assert [f["request_id"] for _, _, f in phases] == ["p"] * (why == "a phase"), why
    orphan = {"schema_version": 2, "kind": "orphan", "request_id": "o", "reason": R.ORPHAN_PHASE, "detail": "x"}
    rows, dead = Pipeline(s, FakeSink()).split([rec(0, orphan, topic=s.joined_topic_name)])[:2]
    assert (list(rows), [d["reason"] for d in dead]) == ([], [R.ORPHAN_PHASE])  # the join's own reason code
    joined = Pipeline(s, FakeSink()).split([rec(0, gen("j"), topic=s.joined_topic_name)])[0]
    assert isinstance(joined, Generations) and joined[0]["src_topic"] == s.joined_topic_name


def test_rows_the_full_path_reads_and_rows_of_structs_keep_their_scopes_in_one_batch():
    """A generation with chunk data is a row of the full path (derive.py),
    its neighbours rows of the C decoder's Structs: one batch, whose
    duplicates are found across both, each topic in its scope."""
    s = Settings(topic=TOPIC)
    chunked = dict(gen("a"), schema_version=2, chunks=5, max_gap_s=0.2, gaps_over=1, gap_threshold_s=0.1)
    batch = [rec(0, gen("a")), rec(1, chunked), rec(2, env(gen("b"), dict(chunked, request_id="c"))),
             rec(0, dict(chunked, request_id="b"), topic=s.joined_topic_name)]
    p = Pipeline(s, FakeSink())
    rows, dead = p.split(batch)[:2]
    assert sorted((r["request_id"], r["src_topic"], r["src_offset"], r["stalled"]) for r in rows) == [
        ("a", TOPIC, 0, None), ("b", TOPIC, 2, None), ("b", s.joined_topic_name, 0, 1), ("c", TOPIC, 2, 1)]
    assert [(d["reason"], d["src_offset"]) for d in dead] == [(R.DUPLICATE, 1)]  # a's second copy, with chunks
    # The first copy in the batch is kept whichever decoder read it.
    rows, dead = Pipeline(s, FakeSink()).split([rec(0, chunked), rec(1, gen("a"))])[:2]
    assert ([(r["src_offset"], r["chunks"]) for r in rows], [d["src_offset"] for d in dead]) == ([(0, 5)], [1])


def test_a_batch_decoded_ahead_is_used_as_admitted_and_decided_in_its_turn():
    """Pipeline.decode_ahead runs while the previous batch is written: its
    columns serve the batch only as admission left it, and whatever reads the
    store or the positions is decided when the batch's turn comes."""
    sink = FakeSink()
    p = pipeline(sink)
    batch = [rec(0, env(gen("a"), gen("b"), version=1)), rec(1, gen("c"))]
    ahead = p.decode_ahead(batch)
    assert p.split(list(batch), ahead)[0] is ahead.decoded.gens and p.counts["batches_decoded_ahead"] == 1
    # Admission dropped a record (a revoked partition, a stale offset): decoded again.
    rows = p.split(batch[1:], ahead)[0]
    assert [r["request_id"] for r in rows] == ["c"] and p.counts["batches_decoded_ahead"] == 1
    # The previous batch stored one of them meanwhile: a duplicate, found in the batch's turn.
    ahead = p.decode_ahead([rec(2, gen("d")), rec(3, gen("e"))])
    sink.ids.add("d")
    rows, dead = p.split(ahead.events, ahead)[:2]
    assert [r["request_id"] for r in rows] == ["e"] and [d["reason"] for d in dead] == [R.DUPLICATE]
    # A re-read window set after the decode (a partition taken over): checked in its turn.
    q = pipeline(FakeSink())
    ahead = q.decode_ahead([rec(5, gen("f"))])
    q.bound_rereads({(TOPIC, 0): 6})
    assert q.split(ahead.events, ahead)[3] == {CELL} and q.reread_records == 1
    # A decode whose clock refused an event is not trusted: the batch is decoded in its turn.
    early = Ahead(batch, p.bucket, p.settings.max_message_bytes, now=T0 - MAX_DURATION_S - 60)
    assert len(early.decoded.gens) == 0 and early.decoded.clocked
    assert len(p.split(batch, early)[0]) == 3 and p.counts["batches_decoded_ahead"] == 2


def test_a_batch_decoded_ahead_brings_its_duplicate_rule_answered_and_is_answered_again_if_the_store_holds_one(
        monkeypatch):
    """The duplicate rule walks every row in Python: the decode ahead answers it for a store holding none of
    the batch's request_ids, and the batch's turn only asks the store. What the store holds, or a re-read row
    it holds, has the rule applied again in the turn, to what it answered."""
    p = pipeline(FakeSink())
    batch = [rec(0, env(gen("a"), gen("b"), gen("a"), version=1)), rec(1, gen("b")), rec(2, gen("c"))]
    ahead = p.decode_ahead(batch)
    assert ahead.decoded.repeats.dropped == {2, 3}
    calls = []
    answer = pipeline_module.dedup.answer
    monkeypatch.setattr(pipeline_module.dedup, "answer", lambda *a: calls.append(a) or answer(*a))
    rows, dead = p.split(list(batch), ahead)[:2]
    assert rows is ahead.decoded.deduped and [r["request_id"] for r in rows] == ["a", "b", "c"] and calls == []
    assert [(d["reason"], d["src_offset"], d["detail"]) for d in dead] == [
        (R.DUPLICATE, 0, "request_id a already stored"), (R.DUPLICATE, 1, "request_id b already stored")]
    assert p.counts["duplicates"] == 2
    # The previous batch stored "c" meanwhile: answered again, in the turn.
    ahead = p.decode_ahead(batch)
    p.sink.ids.add("c")
    calls.clear()
    rows, dead = p.split(list(batch), ahead)[:2]
    assert [r["request_id"] for r in rows] == ["a", "b"] and len(calls) == 1
    assert [d["src_offset"] for d in dead] == [0, 1, 2] and p.counts["duplicates"] == 5


def phases_of(rid: str, t0: float = T0) -> list[dict]:
    """start, first_token, end of one generation (docs/phases.md)."""
    return [{"schema_version": 2, "kind": "start", "request_id": rid, "model": "m", "t0": t0, "input_tokens": 1000},
            {"schema_version": 2, "kind": "first_token", "request_id": rid, "ttft_s": 0.5},
            {"schema_version": 2, "kind": "end", "request_id": rid, "output_tokens": 50, "e2e_s": 2.0}]


def test_a_generation_whose_phases_are_all_in_the_batch_is_written_from_the_raw_topic():
    """batch_join.py: one row, from the record of the phase that completed it;
    the join agent gets a note for it, and the phases of the open one."""
    a, b = phases_of("a"), phases_of("b")
    p = Pipeline(Settings(topic=TOPIC, batch_rows=1), FakeSink())
    p.split([rec(0, gen("first"))])  # past the previous owner's batch: no checks below
    rows, dead, phases, suspects = p.split([rec(1, env(a[0], b[0])), rec(2, env(a[1], b[1])), rec(4, env(a[2], a[1]))])
    assert [(r["request_id"], r["src_topic"], r["src_offset"], r["schema_version"]) for r in rows] == \
        [("a", TOPIC, 4, 2)]
    assert (rows[0]["prefill_tps"], rows[0]["decode_tps"]) == (2000.0, 49 / 1.5)
    assert [(f["request_id"], f["kind"]) for _, _, f in phases] == [("b", "start"), ("b", "first_token"),
                                                                   ("a", "joined_in_ingest")]
    assert (dead, suspects, p.counts["joined_in_batch"], p.counts["phases_forwarded"]) == ([], set(), 1, 3)
    assert p.counts["phases_duplicate_in_batch"] == 1  # the second first_token


def test_phases_one_per_message_all_go_to_the_join_agent():
    """With one message per phase ingest's loop is the bottleneck: the inserts
    a batch join would add to it cost more than the hops it saves (docs/performance/worker.md)."""
    a = phases_of("a")
    p = pipeline(FakeSink())
    # An envelope of one event is one message per phase too.
    rows, dead, phases, _ = p.split([rec(i, ph) for i, ph in enumerate(a)] + [rec(3, env(phases_of("b")[0]))])
    assert (rows, dead, p.counts["joined_in_batch"]) == ([], [], 0)
    assert [(f["request_id"], f["kind"]) for _, _, f in phases] == [("a", "start"), ("a", "first_token"),
                                                                   ("a", "end"), ("b", "start")]


def test_a_re_read_batch_skips_the_row_it_had_joined_and_hands_over_its_cell():
    a = phases_of("a")
    sink = FakeSink(rows=[(TOPIC, 0, 2, "a", CELL)])
    p = pipeline(sink)
    rows, dead, phases, suspects = p.split([rec(2, env(*a))])
    assert (rows, dead, suspects, p.counts["skipped_redelivered"]) == ([], [], {CELL}, 1)
    # The note goes again (the agent takes a second one as a duplicate).
    assert [f["kind"] for _, _, f in phases] == ["joined_in_ingest"]


@pytest.mark.parametrize("stored_from", ["raw", "joined"])
def test_a_generation_joined_both_ways_is_stored_once_and_never_dead_lettered(stored_from):
    """After a crash the batch boundaries move: a generation joined in one
    batch may come back through the agent, and one the agent joined may be
    complete in a re-read batch. Either copy is dropped and counted."""
    s = Settings(topic=TOPIC)
    topic = TOPIC if stored_from == "raw" else s.joined_topic_name
    sink = FakeSink(ids={(topic, "a")})
    p = Pipeline(s, sink)
    rows, dead, phases, _ = p.split([rec(0, env(*phases_of("a")))])
    assert (rows, dead, p.counts["rejoined_dropped"], [f["kind"] for _, _, f in phases]) == \
        ([], [], 1, ["joined_in_ingest"])
    assert (TOPIC, s.joined_topic_name) in sink.id_queries
    envelope = env(dict(gen("a"), schema_version=2))
    rows, dead, _, _ = p.split([rec(0, envelope, topic=s.joined_topic_name)])
    assert (rows, dead, p.counts["rejoined_dropped"]) == ([], [], 2)
    # A single event's copy is still the gateway's duplicate, asked about on its own topic only.
    sink.id_queries.clear()
    rows, dead, _, _ = p.split([rec(5, gen("a"))])
    assert set(sink.id_queries) == {(TOPIC,)}
    want = ([], [R.DUPLICATE]) if stored_from == "raw" else (["a"], [])
    assert ([r["request_id"] for r in rows], [d["reason"] for d in dead]) == want


def test_a_joined_and_an_agent_joined_copy_in_one_batch_keep_one_row():
    s = Settings(topic=TOPIC)
    p = Pipeline(s, FakeSink())
    envelope = env(dict(gen("a"), schema_version=2))
    batch = [rec(0, envelope, topic=s.joined_topic_name), rec(0, env(*phases_of("a")))]
    rows, dead, _, _ = p.split(batch)
    assert [r["src_topic"] for r in rows] == [s.joined_topic_name] and dead == [] and p.counts["rejoined_dropped"] == 1


def test_events_outside_the_raw_retention_are_dead_lettered_on_every_path():
    """A t0 the store's TTL would delete as it is written is outside_retention
    (it was stored and vanished); its neighbours stay columns."""
    s = Settings(topic=TOPIC, raw_ttl_days=30)
    now = time.time()
    old, edge = now - 31 * 86_400, now - 29 * 86_400
    for batch in ([rec(0, gen("o", t0=old))],                                   # one event
                  [rec(0, env(gen("a", t0=edge), gen("o", t0=old), version=1))],  # in an envelope
                  [rec(0, gen("a", t0=edge)), rec(1, gen("o", t0=old))]):       # beside a good one
        rows, dead, _, _ = Pipeline(s, FakeSink()).split(batch)
        assert [d["reason"] for d in dead] == [R.OUTSIDE_RETENTION], batch
        assert "PHASEMETER_RAW_TTL_DAYS" in dead[0]["detail"]
        assert [r["request_id"] for r in rows] == ["a"] * (len(rows) > 0)
    rows = Pipeline(s, FakeSink()).split([rec(0, env(gen("a", t0=edge), gen("b", t0=edge), version=1))])[0]
    assert isinstance(rows, Generations) and len(rows) == 2  # inside: still columns
    future = Pipeline(s, FakeSink()).split([rec(0, gen("f", t0=now + MAX_DURATION_S + 60))])[1]
    assert [d["reason"] for d in future] == [R.ABSURD]  # more than a day ahead: the contract's bound, as before


def test_a_batch_decoded_ahead_is_checked_against_the_retention_of_its_turn():
    s = Settings(topic=TOPIC, raw_ttl_days=30)
    p = Pipeline(s, FakeSink())
    now = time.time()
    batch = [rec(0, env(gen("a", t0=now - 30 * 86_400 - 5), version=1))]
    early = Ahead(batch, p.bucket, p.settings.max_message_bytes, now - 60, oldest=p.oldest(now - 60))
    assert len(early.decoded.gens) == 1  # inside the bound a minute earlier
    rows, dead, _, _ = p.split(batch, early)
    assert [d["reason"] for d in dead] == [R.OUTSIDE_RETENTION] and len(rows) == 0
    assert p.counts["batches_decoded_ahead"] == 0


@pytest.mark.parametrize("shape", ["envelope", "messages"])
def test_a_replica_flood_keeps_k_values_per_model_the_rest_other_whatever_the_batch_holds(shape):
    p = Pipeline(Settings(topic=TOPIC, label_top_k=4), FakeSink())
    events = [{**gen(f"r{i}"), "replica": f"vllm-{i}"} for i in range(200)]
    batch = [rec(0, env(*events, version=1))] if shape == "envelope" else [rec(i, e) for i, e in enumerate(events)] + [rec(200, phases_of("p")[0])]
    rows = p.split(batch)[0]
    assert len(rows) == 200 and isinstance(rows, Generations)
    kept = {r["replica"] for r in rows}
    assert kept == {"vllm-0", "vllm-1", "vllm-2", "other"}  # the stored "seeded-0" is one of the 4
    assert p.counts["labels_other_replica"] == 197          # /health shows the counts


def test_otlp_spans_ignored_and_replicas_dropped_are_counted_per_reason():
    s = Settings(topic=TOPIC, otlp_topic="gen.otlp", otlp_model="m")
    p = Pipeline(s, FakeSink())
    attrs = {"gen_ai.usage.prompt_tokens": 10, "gen_ai.latency.e2e": 1.0}   # an engine span, no completion tokens

    def span(name, a):
        return {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": name, "startTimeUnixNano": str(int(T0 * 1e9)),
                "endTimeUnixNano": str(int((T0 + 1) * 1e9)),
                "attributes": [{"key": k, "value": {"intValue": str(v)} if isinstance(v, int) else
                                {"doubleValue": v}} for k, v in a.items()]}
    msg = {"resourceSpans": [{"resource": {"attributes": [{"key": "service.instance.id", "value": {
        "stringValue": "3f2a9c1e-5b7d-4e8f-9a0b-1c2d3e4f5a6b"}}]}, "scopeSpans": [{"spans": [
            span(" Req 1", attrs), span("GET /", {}),
            span("llm_request", {**attrs, "gen_ai.usage.completion_tokens": 3,
                                 "gen_ai.latency.time_to_first_token": 0.1})]}]}]}
    rows = p.split([rec(0, msg, topic=s.otlp_topic)])[0]
    assert len(rows) == 1 and rows[0]["replica"] == ""
    assert p.counts["otlp_spans_ignored"] == 2
    assert (p.counts["otlp_spans_ignored_embedding"], p.counts["otlp_spans_ignored_not_llm"],
            p.counts["otlp_replicas_dropped"]) == (1, 1, 1)
    # Its mapping reads the clock: a batch holding an OTLP record is decoded in its turn only, once.
    batch = [rec(1, gen("g")), rec(1, msg, topic=s.otlp_topic)]
    ahead = p.decode_ahead(batch)
    assert ahead.decoded is None
    rows = p.split(batch, ahead)[0]
    assert [(r["request_id"], r["src_topic"]) for r in rows][0] == ("g", TOPIC) and p.counts["otlp_spans_ignored"] == 4
    assert len(rows) == 2 and rows[1]["src_topic"] == s.otlp_topic
    assert p.counts["batches_decoded_ahead"] == 0


def by_the_rules(s: Settings, batch, stored_rows, stored_dead, stored_ids) -> tuple:
    """The exactly-once rules written out on the full path's answer for each
    message (derive.process_message), record by record: what split must give.
    -> (rows, dead letters as (reason, detail, source), cells to check,
    skipped, duplicates, rejoined, re-read records)."""
    held = {k[:4]: k[4] for k in stored_rows}
    most = {}
    for t, p, o in [k[:3] for k in stored_rows] + list(stored_dead):
        most[t, p] = max(most.get((t, p), -1), o)
    rows, dead, cells, skipped, window, taken = [], [], set(), 0, {}, set()
    now, bucket = time.time(), Pipeline(s, FakeSink()).bucket
    for r in batch:
        m = r.message
        source = (m.topic, m.partition, m.offset)
        seen = window.setdefault((m.topic, m.partition), [0, 0])
        inside = seen[0] < s.batch_rows and seen[1] < s.batch_bytes
        seen[0] += 1
        seen[1] += len(r.value)
        window["records"] = window.get("records", 0) + inside
        for x in process_message(r.value, bucket, s.max_message_bytes, now, internal=m.topic != s.topic,
                                 oldest=oldest_kept(now, s.raw_ttl_days)):
            if not isinstance(x, dict):
                dead.append((x.reason, x.detail, source))
                continue
            x.update(src_topic=m.topic, src_partition=m.partition, src_offset=m.offset)
            # The store holds one row per (record, request_id), the first copy's; its id counts as stored.
            if m.offset <= most.get((m.topic, m.partition), -1) and (*source, x["request_id"]) in held \
                    and (*source, x["request_id"]) not in taken:
                cells.add(held[(*source, x["request_id"])])
                skipped += 1
                taken.add((*source, x["request_id"]))
                continue
            if inside:
                cells.add(cell(x["t0"]))
            rows.append(x)
    kept, duplicates, rejoined = [], 0, 0
    for scope in (s.joined_topic_name, s.topic):  # the joined topic's scope first
        topics = (s.topic, scope) if scope == s.joined_topic_name else (scope,)
        seen = {i for i in stored_ids if isinstance(i, str)} | {i for t, i in (x for x in stored_ids
                                                                              if isinstance(x, tuple)) if t in topics}
        seen |= {rid for t, _, _, rid in taken if t in topics}
        for x in [x for x in rows if x["src_topic"] == scope]:
            if x["request_id"] not in seen:
                seen.add(x["request_id"])
                kept.append(x)
            elif scope == s.joined_topic_name:
                rejoined += 1
            else:
                duplicates += 1
                dead.append((R.DUPLICATE, f"request_id {x['request_id']} already stored",
                             (x["src_topic"], x["src_partition"], x["src_offset"])))
    letters = [d for d in dead if d[2] not in stored_dead]  # a re-read record's, stored before
    return kept, letters, cells, skipped + len(dead) - len(letters), duplicates, rejoined, window.get("records", 0)


@st.composite
def real_batches(draw):
    """Generations from both topics, alone and in envelopes, with bad events,
    repeated request_ids, and a store holding some of them (a re-read)."""
    s = Settings(topic=TOPIC, batch_rows=draw(st.integers(1, 6)))
    ids = [f"r{i}" for i in range(draw(st.integers(1, 8)))]
    batch, stored_rows, stored_dead, stored_ids = [], [], [], set()
    for offset in range(draw(st.integers(1, 6))):
        topic = draw(st.sampled_from([TOPIC, TOPIC, s.joined_topic_name]))
        events = []
        for _ in range(draw(st.integers(1, 4))):
            e = dict(gen(draw(st.sampled_from(ids)), t0=T0 + draw(st.integers(0, 3)) * 60), schema_version=2)
            e.update(draw(st.sampled_from([{}, {}, {"ttft_s": -1}, {"e2e_s": 0.1}, {"prompt": "x"}, {"kind": "x"}])))
            events.append(e)
        value = env(*events) if len(events) > 1 or draw(st.booleans()) else events[0]
        batch.append(rec(offset, value, topic=topic))
        if draw(st.integers(0, 3)) == 0:  # the store holds this record's first row, or its dead letters
            stored_rows.append((topic, 0, offset, events[0]["request_id"], cell(events[0]["t0"])))
        if draw(st.integers(0, 3)) == 0:
            stored_dead.append((topic, 0, offset))
    for rid in ids:
        if draw(st.integers(0, 4)) == 0:
            stored_ids.add(draw(st.sampled_from([rid, (TOPIC, rid), (s.joined_topic_name, rid)])))
    return s, batch, stored_rows, stored_dead, stored_ids


@settings(max_examples=300)
@given(real_batches())
def test_a_batch_keeps_the_exactly_once_rules_record_by_record(case):
    """Bad events, duplicates, re-reads and both topics in one batch: split
    gives the rows, dead letters, cells to check and counts that the rules
    give record by record on the full path's answers (`by_the_rules`)."""
    s, batch, stored_rows, stored_dead, stored_ids = case
    p = Pipeline(s, FakeSink(rows=stored_rows, dead=stored_dead, ids=stored_ids))
    rows, dead, phases, suspects = p.split(list(batch))
    assert isinstance(rows, Generations) or len(rows) == 0
    want_rows, want_dead, cells, skipped, duplicates, rejoined, rereads = by_the_rules(
        s, batch, stored_rows, stored_dead, stored_ids)
    assert len(rows) == len(want_rows) and len(dead) == len(want_dead)
    assert sorted(map(sorted, (r.items() for r in rows))) == sorted(map(sorted, (r.items() for r in want_rows)))
    assert [(d["reason"], d["detail"], (d["src_topic"], d["src_partition"], d["src_offset"])) for d in dead] == \
        want_dead
    assert (phases, suspects, p.counts["skipped_redelivered"], p.counts["duplicates"], p.counts["rejoined_dropped"],
            p.reread_records) == ([], cells, skipped, duplicates, rejoined, rereads)


@pytest.mark.parametrize("beside", ["generations", "a phase"])
def test_the_dead_letter_of_an_envelopes_event_keeps_that_event_whatever_the_batch_holds(beside):
    """dead_letter.payload: the refused event, redacted; not the envelope's
    first bytes, whether a phase rides in the batch or not."""
    bad = dict(gen("b"), prompt="SECRET")
    batch = [rec(0, env(*[gen(f"a{i}") for i in range(60)], bad, version=2))]
    if beside == "a phase":
        batch.append(rec(1, {"schema_version": 2, "kind": "start", "request_id": "p", "model": "m", "t0": T0,
                             "input_tokens": 5}))
    rows, dead = pipeline(FakeSink()).split(batch)[:2]
    assert isinstance(rows, Generations) and len(rows) == 60
    assert [(d["reason"], d["detail"][:11]) for d in dead] == [(R.UNKNOWN_FIELD, "events[60]:")]
    assert json.loads(base64.b64decode(dead[0]["payload"])) == {**bad, "prompt": None}
    assert dead[0]["payload_size"] == len(batch[0].value)


def test_a_full_path_row_arrow_cannot_take_is_dead_lettered_and_its_neighbours_keep_their_rules(monkeypatch):
    """The full path's rows become columns once (columnar.columns_of): a value
    Arrow cannot take (past int64) is refused as the store would refuse it,
    and the rows beside it keep their duplicate scopes and re-read cells."""
    from phasemeter.stream_jobs import fast_decode

    real = fast_decode.process_message

    def with_a_huge_count(*args, **kw):
        out = real(*args, **kw)
        for r in out:
            if isinstance(r, dict) and r["request_id"] == "b":
                r["input_tokens"] = 10**30
        return out
    monkeypatch.setattr(fast_decode, "process_message", with_a_huge_count)
    s = Settings(topic=TOPIC, batch_rows=2)
    p = Pipeline(s, FakeSink())
    p.bound_rereads({(TOPIC, 0): 10**9, (s.joined_topic_name, 0): 10**9})  # the first 2 records of each: checked
    chunked = dict(schema_version=2, chunks=5, max_gap_s=0.2, gaps_over=1, gap_threshold_s=0.1)
    batch = [rec(0, gen("a")), rec(1, dict(gen("b"), **chunked)), rec(2, dict(gen("a"), **chunked)),
             rec(0, gen("j"), topic=s.joined_topic_name), rec(3, phases_of("p")[0])]
    rows, dead, phases, suspects = p.split(batch)
    assert isinstance(rows, Generations) and len(rows) == 2
    assert [(r["request_id"], r["src_topic"], r["src_offset"]) for r in rows] == [
        ("a", TOPIC, 0), ("j", s.joined_topic_name, 0)]  # the C decoder's rows in the batch's order
    assert [(d["reason"], d["src_offset"]) for d in dead] == [(R.STORE_REFUSED, 1), (R.DUPLICATE, 2)]
    assert "OverflowError" in dead[0]["detail"] or "ArrowInvalid" in dead[0]["detail"]
    assert (p.counts["duplicates"], len(phases), suspects) == (1, 1, {CELL})


def test_a_failure_of_the_decode_costs_only_the_message_that_raises(monkeypatch):
    """A bug in the decode (pure, before any bookkeeping) must not stop every
    batch that meets the same records: each message is decoded alone, the
    one that raises is dead-lettered as `internal`, the others go on, and
    the failure is logged and counted. Decoding ahead fails the same way:
    the batch is decoded in its turn."""
    good = [rec(0, env(gen("a"), gen("b"), version=1)), rec(1, gen("c")), rec(2, env(*phases_of("p")))]
    assert pipeline(FakeSink()).split(good)[0].request_ids == ["a", "b", "c", "p"]
    real = batch_decode.decoded_events

    def broken(raw, *args, **kwargs):
        if b'"c"' in raw:
            raise ValueError("a bug")
        return real(raw, *args, **kwargs)
    monkeypatch.setattr(batch_decode, "decoded_events", broken)
    p = pipeline(FakeSink())
    assert p.decode_ahead(good) is None
    rows, dead, phases, _ = p.split(good)
    assert rows.request_ids == ["a", "b", "p"] and [f["kind"] for _, _, f in phases] == ["joined_in_ingest"]
    assert [(d["reason"], d["src_offset"], d["detail"]) for d in dead] == [(R.INTERNAL, 1, "ValueError: a bug")]
    assert p.counts["batches_decode_failed"] == 1
