"""A batch decoded into columns (stream_jobs/columnar.py) against the row
path (derive.process_message, one definition of the metrics): the same rows,
the same Arrow table and batch token, or None whenever any message needs the
row path."""

from __future__ import annotations

import json
from types import SimpleNamespace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phasemeter.stream_jobs.columnar import Ahead, Generations, from_events, ts_bounds
from phasemeter.stream_jobs.derive import ROW_COLUMNS, Phase, Rejection, process_message
from phasemeter.stream_jobs.fast_decode import common_fields
from phasemeter.stream_jobs.pipeline import _cell
from phasemeter.stream_jobs.sink import _arrow, _table
from tests.unit.stream_jobs.test_derive_properties import BUCKET, NOW, mutated, valid_events

LIMIT = 1_000_000


def record(offset: int, value: bytes, partition: int = 0, topic: str = "gen"):
    return SimpleNamespace(message=SimpleNamespace(topic=topic, partition=partition, offset=offset), value=value)


def encode(events: list[dict], wrap: bool) -> bytes:
    if wrap:
        return json.dumps({"schema_version": 1, "kind": "batch", "events": events}).encode()
    assert len(events) == 1
    return json.dumps(events[0]).encode()


def row_path(records) -> list:
    """What the row path makes of the batch: every result, rows with their source."""
    out = []
    for r in records:
        for result in process_message(r.value, BUCKET, LIMIT, NOW):
            if isinstance(result, dict):
                result.update(src_topic=r.message.topic, src_partition=r.message.partition,
                              src_offset=r.message.offset)
            out.append(result)
    return out


def messages(draw_events, wraps) -> list:
    out, offset = [], 0
    for events, wrap in zip(draw_events, wraps, strict=True):
        for chunk in ([events] if wrap else [[e] for e in events]):
            out.append(record(offset, encode(chunk, wrap), partition=offset % 3))
            offset += 1
    return out


def same_as_rows(records) -> Generations | None:
    gens = from_events(records, BUCKET, LIMIT, NOW)
    expected = row_path(records)
    in_c = all(common_fields(r.value, NOW, 10_000) is not None for r in records)
    if not in_c or any(not isinstance(x, dict) for x in expected):
        assert gens is None, expected
        return None
    assert gens is not None, expected
    assert len(gens) == len(expected)
    assert list(gens) == expected  # every value of every row, None stays None
    assert gens.arrow().to_pylist() == _arrow(expected, ROW_COLUMNS).to_pylist()
    assert _table("generations", gens, ROW_COLUMNS)[1] == _table("generations", expected, ROW_COLUMNS)[1]
    assert ts_bounds(gens) == ts_bounds(expected)
    assert gens.cells(range(len(gens))) == {_cell(r) for r in expected}
    return gens


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(valid_events(), min_size=1, max_size=6), min_size=1, max_size=4), st.data())
def test_well_formed_generations_give_the_row_paths_rows(batches, data):
    wraps = [data.draw(st.booleans()) for _ in batches]
    assert same_as_rows(messages(batches, wraps)) is not None


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(valid_events(), min_size=1, max_size=4), mutated(), st.booleans(), st.data())
def test_one_message_for_the_row_path_sends_the_whole_batch_there(events, case, wrap, data):
    """A mutated event anywhere: None unless the row path still takes it as a
    generation in C (then the same rows)."""
    bad, _ = case
    where = data.draw(st.integers(0, len(events)))
    same_as_rows(messages([events[:where] + [bad] + events[where:]], [wrap]))


def test_phases_and_malformed_messages_take_the_row_path():
    start = {"schema_version": 2, "kind": "start", "request_id": "p", "model": "m", "t0": NOW - 5,
             "input_tokens": 10}
    good = {"schema_version": 1, "kind": "generation", "request_id": "g", "model": "m", "t0": NOW - 5,
            "ttft_s": 0.5, "e2e_s": 2.0, "input_tokens": 1000, "output_tokens": 50}
    assert from_events([record(0, encode([good], False))], BUCKET, LIMIT, NOW) is not None
    for value in (encode([good, start], True), encode([start], False), b"{", b"",
                  json.dumps({**good, "t0": NOW + 2 * 86400}).encode(),  # after now + 1 day
                  json.dumps({**good, "chunks": 3}).encode()):  # stall data: the full path's
        assert from_events([record(0, encode([good], False)), record(1, value)], BUCKET, LIMIT, NOW) is None, value
    assert from_events([record(0, encode([good], True))], BUCKET, 100, NOW) is None  # over the size limit
    assert from_events([record(0, encode([good] * 3, True))], BUCKET, LIMIT, NOW, max_batch=2) is None
    assert isinstance(process_message(encode([start], False), BUCKET, LIMIT, NOW)[0], Phase)
    assert isinstance(process_message(b"{", BUCKET, LIMIT, NOW)[0], Rejection)


def test_rows_of_each_message_stay_in_order_with_their_source():
    events = [{"schema_version": 1, "kind": "generation", "request_id": f"r{i}", "model": "m", "t0": NOW - i,
               "ttft_s": 0.5, "e2e_s": 2.0, "input_tokens": 100 * i, "output_tokens": i} for i in range(1, 8)]
    # The worker may read several ingest topics in one batch.
    records = [record(5, encode(events[:3], True), partition=2), record(9, encode(events[3:4], False)),
               record(6, encode(events[4:], True), partition=2, topic="otlp")]
    gens = same_as_rows(records)
    assert gens.per_message == [3, 1, 3]
    assert [(r["request_id"], r["src_topic"], r["src_partition"], r["src_offset"]) for r in gens] == [
        ("r1", "gen", 2, 5), ("r2", "gen", 2, 5), ("r3", "gen", 2, 5), ("r4", "gen", 0, 9),
        ("r5", "otlp", 2, 6), ("r6", "otlp", 2, 6), ("r7", "otlp", 2, 6)]
    assert gens.cells([3]) == {_cell(gens[3])}


def test_each_check_across_fields_at_its_bound():
    """ordered_fields' checks, each just inside (the same rows as the row
    path) and just outside (None: the row path rejects it)."""
    base = {"schema_version": 1, "kind": "generation", "request_id": "b", "model": "m", "t0": NOW - 60,
            "ttft_s": 0.5, "e2e_s": 2.0, "input_tokens": 1000, "output_tokens": 50}
    cases = [({"e2e_s": 0.5}, {"e2e_s": 0.49}),                                # t_end before t_first
             ({"queue_s": 0.5}, {"queue_s": 0.51}),                            # scheduled after the first token
             ({"ttft_s": None, "output_tokens": 0, "queue_s": 2.0},
              {"ttft_s": None, "output_tokens": 0, "queue_s": 2.01}),           # ... or after the end
             ({"ttft_s": None, "output_tokens": 0}, {"ttft_s": None, "output_tokens": 1}),  # tokens, no first
             ({"cached_input_tokens": 1000}, {"cached_input_tokens": 1001}),  # more cached than read
             ({"t0": NOW + 86400}, {"t0": NOW + 86400.01})]                     # after now + 1 day
    for inside, outside in cases:
        records = [record(0, encode([base, {**base, "request_id": "x", **inside}], True))]
        assert same_as_rows(records) is not None, inside
        records = [record(0, encode([base, {**base, "request_id": "x", **outside}], True))]
        assert from_events(records, BUCKET, LIMIT, NOW) is None, outside
        assert any(isinstance(x, Rejection) for x in row_path(records)), outside


def test_a_batch_decoded_ahead_serves_only_the_same_records_in_the_same_order():
    events = [{"schema_version": 1, "kind": "generation", "request_id": f"r{i}", "model": "m", "t0": NOW - i,
               "ttft_s": 0.5, "e2e_s": 2.0, "input_tokens": 100, "output_tokens": 3} for i in range(3)]
    records = [record(i, encode([e], False)) for i, e in enumerate(events)]
    ahead = Ahead(records, BUCKET, LIMIT, NOW)
    assert list(ahead.gens) == list(same_as_rows(records))
    assert ahead.rows_for(list(records)).gens is ahead.gens  # the same records, in a list of the caller's
    assert ahead.rows_for(records[:2]) is None  # admission dropped one
    assert ahead.rows_for(records[::-1]) is None
    assert ahead.rows_for([record(0, records[0].value), *records[1:]]) is None  # equal, not the same record
    assert Ahead([record(0, b"{")], BUCKET, LIMIT, NOW).rows_for([]) is None


def test_the_retention_bound_sends_the_batch_to_the_row_path_which_names_it():
    oldest = NOW - 90 * 86_400
    base = {"schema_version": 1, "kind": "generation", "request_id": "b", "model": "m", "t0": oldest,
            "ttft_s": 0.5, "e2e_s": 2.0, "input_tokens": 1000, "output_tokens": 50}
    inside = [record(0, encode([base, {**base, "request_id": "x"}], True))]
    gens = from_events(inside, BUCKET, LIMIT, NOW, oldest=oldest)
    assert gens is not None and list(gens) == row_path(inside)
    outside = [record(0, encode([base, {**base, "request_id": "x", "t0": oldest - 0.01}], True))]
    assert from_events(outside, BUCKET, LIMIT, NOW, oldest=oldest) is None
    assert [getattr(r, "reason", None) for r in process_message(outside[0].value, BUCKET, LIMIT, NOW, oldest=oldest)] \
        == [None, "outside_retention"]
    assert Ahead(inside, BUCKET, LIMIT, NOW, oldest).rows_for(inside, oldest + 1) is None  # re-checked in its turn
