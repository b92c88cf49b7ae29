"""A batch decoded (stream_jobs/batch_decode.py, its generations as
columns: stream_jobs/columnar.py) against the row path
(derive.process_message, message by message): the same rows, Arrow table
and batch token, and the same rejections, whatever its events."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from types import SimpleNamespace

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from phasemeter.stream_jobs import dead_letter
from phasemeter.stream_jobs.batch_decode import Ahead, Decoded, decode
from phasemeter.stream_jobs.columnar import Generations, ts_bounds
from phasemeter.stream_jobs import reasons as R
from phasemeter.stream_jobs.contract import MAX_DURATION_S, MAX_TOKENS, MIN_T0
from phasemeter.stream_jobs.fast_decode import decoded_events
from phasemeter.stream_jobs.derive import ROW_COLUMNS, Phase, Rejection, process_message
from phasemeter.stream_jobs.sink import _arrow, batch_token, counted_token
from tests.unit.stream_jobs.test_derive_properties import BUCKET, NOW, mutated, valid_events

LIMIT = 1_000_000


def _cell(row: dict) -> tuple:
    """A row's minute cell, as the ledger gives a stored row's (ledger.Stored)."""
    return row["model"], row["input_bucket"], datetime.fromtimestamp(row["ts"] // 60 * 60, timezone.utc)


def token(rows) -> str:
    """The sink's batch token of these rows: of their records, row by row."""
    return batch_token("generations", [(r["src_topic"], r["src_partition"], r["src_offset"]) for r in rows])


def record(offset: int, value: bytes, partition: int = 0, topic: str = "gen"):
    return SimpleNamespace(message=SimpleNamespace(topic=topic, partition=partition, offset=offset), value=value)


def encode(events: list[dict], wrap: bool) -> bytes:
    if wrap:
        return json.dumps({"schema_version": 1, "kind": "batch", "events": events}).encode()
    assert len(events) == 1
    return json.dumps(events[0]).encode()


def row_path(records, oldest: float = MIN_T0) -> list:
    """What the row path makes of the batch: every result, rows with their source."""
    out = []
    for r in records:
        for result in process_message(r.value, BUCKET, LIMIT, NOW, oldest=oldest):
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


def strict_json(r) -> bool:
    try:
        msgspec.json.decode(r.value)
    except msgspec.DecodeError:
        return False
    return True


def _key(row: dict) -> tuple:
    return row["src_topic"], row["src_partition"], row["src_offset"], row["request_id"], repr(sorted(row.items()))


def same_as_row_path(records, oldest: float = MIN_T0) -> Decoded:
    """`decode` of the batch against the row path, message by message: the
    same rows (values, Arrow table, batch token, cells), the C decoder's
    and the full path's, in the order of their records, and the same
    rejections in the same order. The phases are checked by the tests that
    send them."""
    d = decode(records, BUCKET, LIMIT, NOW, oldest=oldest, payload_cap=4096)
    expected = row_path(records, oldest)
    rows = sorted((x for x in expected if isinstance(x, dict)), key=_key)
    refused = [(m, x) for m, r in enumerate(records) for x in row_path([r], oldest) if isinstance(x, Rejection)]
    gens = d.gens
    assert len(gens) == len(rows) and len(d.refused) == len(refused)
    assert sorted(gens, key=_key) == rows  # every value of every row, None stays None
    assert d.message.tolist() == sorted(d.message.tolist())  # in the order of their records
    assert [(r["src_topic"], r["src_partition"], r["src_offset"]) for r in gens] == [
        (records[m].message.topic, records[m].message.partition, records[m].message.offset) for m in d.message]
    assert d.refused == refused
    # Each dead letter's payload: its event's alone, redacted, when it was refused inside an envelope.
    assert d.payloads == [dead_letter.payloads(records[m].value, 4096, [x.event])[0] for m, x in refused]
    assert [x.event for _, x in d.refused] == [x.event for _, x in refused]
    assert sorted(gens.arrow().to_pylist(), key=_key) == sorted(_arrow(rows, ROW_COLUMNS).to_pylist(), key=_key)
    assert counted_token("generations", gens.counted_offsets()) == token(rows)
    as_rows = Generations.from_rows(rows)  # the row path's rows, turned into columns
    assert sorted(as_rows.arrow().to_pylist(), key=_key) == sorted(gens.arrow().to_pylist(), key=_key)
    assert list(as_rows) == rows
    assert counted_token("generations", as_rows.counted_offsets()) == token(rows)
    assert ts_bounds(gens) == ((min(r["ts"] for r in rows), max(r["ts"] for r in rows)) if rows else None)
    assert ts_bounds(as_rows) == ts_bounds(gens)
    assert gens.cells(range(len(gens))) == {_cell(r) for r in rows}
    return d


def same_as_rows(records, oldest: float = MIN_T0) -> Generations:
    """A batch of well-formed generations the C decoder takes: the row path's rows, as columns."""
    d = same_as_row_path(records, oldest)
    assert d.refused == [] and d.forward == [] and not any(d.joined)
    return d.gens


@settings(max_examples=300)
@given(st.lists(st.lists(valid_events(), min_size=1, max_size=6), min_size=1, max_size=4), st.data())
def test_well_formed_generations_give_the_row_paths_rows(batches, data):
    wraps = [data.draw(st.booleans()) for _ in batches]
    same_as_rows(messages(batches, wraps))


@settings(max_examples=400)
@given(st.lists(valid_events(), min_size=1, max_size=4), mutated(), st.booleans(), st.data())
def test_a_mutated_event_is_refused_as_the_row_path_refuses_it_and_its_neighbours_stay(events, case, wrap, data):
    """A mutated event anywhere, alone or in an envelope, beside a clean
    message: its rejection (or its row) is the row path's, the others' rows too."""
    bad, _ = case
    where = data.draw(st.integers(0, len(events)))
    same_as_row_path(messages([events[:where] + [bad] + events[where:], events], [wrap, True]))


def test_phases_and_malformed_messages():
    start = {"schema_version": 2, "kind": "start", "request_id": "p", "model": "m", "t0": NOW - 5,
             "input_tokens": 10}
    good = {"schema_version": 1, "kind": "generation", "request_id": "g", "model": "m", "t0": NOW - 5,
            "ttft_s": 0.5, "e2e_s": 2.0, "input_tokens": 1000, "output_tokens": 50}
    stall = {**good, "schema_version": 2, "chunks": 3}  # stall data: the full path's row
    for value, rows, forwarded in ((encode([good, start], True), 2, 1), (encode([start], False), 1, 1),
                                   (json.dumps(stall).encode(), 2, 0)):
        d = same_as_row_path([record(0, encode([good], False)), record(1, value)])
        assert (len(d.gens), len(d.forward)) == (rows, forwarded), value
        assert [f[2] for f in d.forward] == [{"kind": "start", "request_id": "p", "model": "m", "t0": NOW - 5,
                                              "input_tokens": 10}][:forwarded], value
    assert [r["chunks"] for r in d.gens] == [None, 3]  # in the order of their records
    for value in (b"{", b"", None, json.dumps({**good, "t0": NOW + 2 * 86400}).encode(),  # after now + 1 day
                  encode([good, {**good, "kind": "orphan"}], True)):
        d = same_as_row_path([record(0, encode([good], False)), record(1, value)])
        assert len(d.gens) >= 1 and d.refused, value
    assert decode([record(0, encode([good], True))], BUCKET, 100, NOW).refused[0][1].reason == "oversize"
    d = decode([record(0, encode([good] * 3, True))], BUCKET, LIMIT, NOW, max_batch=2)
    assert (len(d.gens), [r.reason for _, r in d.refused]) == (0, ["bad_value"])  # more events than allowed
    assert isinstance(process_message(encode([start], False), BUCKET, LIMIT, NOW)[0], Phase)


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
    # A subset (duplicates dropped): its rows, and the token of those rows as
    # dicts; each run of one message's rows counted once, not row by row.
    for keep in ([0, 2, 3, 6], [1, 2], [6, 0, 1], [], list(range(7))):
        part = gens.take(keep)
        assert list(part) == [gens[i] for i in keep]
        assert counted_token("generations", part.counted_offsets()) == token(list(part))
    assert gens.take([0, 2, 3, 6]).per_message == [2, 1, 1]


def test_an_envelope_taken_event_by_event_gives_the_row_paths_answers_whatever_else_it_holds():
    """A bad event beside events the C decoder takes but the full path must
    name (a control character, a v1 event naming a v2-only field) or a phase:
    each event's answer is the row path's."""
    good = {"schema_version": 1, "kind": "generation", "request_id": "g", "model": "m", "t0": NOW - 5,
            "ttft_s": 0.5, "e2e_s": 2.0, "input_tokens": 1000, "output_tokens": 50}
    bad = {**good, "request_id": "b", "ttft_s": -1}
    for other in ({**good, "request_id": "c", "gateway": "g\x1b"}, {**good, "request_id": "s", "streamed": True},
                  {**good, "request_id": "n", "prefill_replica": None}):
        for events in ([good, bad, other, good], [other, bad], [bad, other, bad]):
            d = same_as_row_path([record(0, encode(events, True))])
            assert d is not None and len(d.refused) == sum(e is not good for e in events), (other, events)
    phase = {"schema_version": 2, "kind": "start", "request_id": "p", "model": "m", "t0": NOW - 5, "input_tokens": 1}
    d = same_as_row_path([record(0, json.dumps({"schema_version": 2, "kind": "batch",
                                                "events": [good, bad, phase]}).encode())])
    assert (d.gens.request_ids, [r.event for _, r in d.refused], [f[2]["request_id"] for f in d.forward]) == (
        ["g"], [1], ["p"])


def test_each_check_across_fields_at_its_bound():
    """formulas.CHECKS, each just inside (a row) and just outside (the row
    path's rejection, the rest of the envelope still rows)."""
    base = {"schema_version": 1, "kind": "generation", "request_id": "b", "model": "m", "t0": NOW - 60,
            "ttft_s": 0.5, "e2e_s": 2.0, "input_tokens": 1000, "output_tokens": 50}
    cases = [({"e2e_s": 0.5}, {"e2e_s": 0.49}),                                # t_end before t_first
             ({"queue_s": 0.5}, {"queue_s": 0.51}),                            # scheduled after the first token
             ({"ttft_s": None, "output_tokens": 0, "queue_s": 2.0},
              {"ttft_s": None, "output_tokens": 0, "queue_s": 2.01}),           # ... or after the end
             ({"ttft_s": None, "output_tokens": 0}, {"ttft_s": None, "output_tokens": 1}),  # tokens, no first
             ({"cached_input_tokens": 1000}, {"cached_input_tokens": 1001}),  # more cached than read
             ({"t0": NOW + 86400}, {"t0": NOW + 86400.01}),                    # after now + 1 day
             ({"schema_version": 2, "kv_transfer_s": 0.5},
              {"schema_version": 2, "kv_transfer_s": 0.51}),                    # KV moved after the first token
             ({"schema_version": 2, "ttft_s": None, "output_tokens": 0, "kv_transfer_s": 2.0},
              {"schema_version": 2, "ttft_s": None, "output_tokens": 0, "kv_transfer_s": 2.01})]  # ... or the end
    assert len(cases) == 8
    for inside, outside in cases:
        records = [record(0, encode([base, {**base, "request_id": "x", **inside}], True))]
        assert len(same_as_rows(records)) == 2, inside
        records = [record(0, encode([base, {**base, "request_id": "x", **outside}], True))]
        d = same_as_row_path(records)
        assert len(d.gens) == 1 and [m for m, _ in d.refused] == [0], outside


def test_each_range_at_its_bound_is_found_on_columns_and_named_by_the_full_path():
    """formulas.out_of_range: a count or a duration just inside its range is a
    row; just outside, its envelope still decodes whole in C (the Struct
    types it only), and the full path names the reason for that event."""
    base = {"schema_version": 2, "kind": "generation", "request_id": "b", "model": "m", "t0": NOW - 60,
            "ttft_s": 0.5, "e2e_s": 2.0, "input_tokens": 1000, "output_tokens": 50}
    day, most = MAX_DURATION_S, MAX_TOKENS
    cases = [({"ttft_s": 0, "queue_s": 0}, {"ttft_s": -1}, R.IMPOSSIBLE_ORDER),
             ({"queue_s": 0.0}, {"queue_s": -0.001}, R.IMPOSSIBLE_ORDER),
             ({"ttft_s": None, "output_tokens": 0, "e2e_s": day}, {"e2e_s": day + 0.01}, R.ABSURD),
             ({"input_tokens": most}, {"input_tokens": most + 1}, R.ABSURD),
             ({"input_tokens": 0}, {"input_tokens": -1}, R.NEGATIVE),
             ({"output_tokens": 0, "ttft_s": 0.5}, {"output_tokens": -3}, R.NEGATIVE),
             ({"cached_input_tokens": 0}, {"cached_input_tokens": -1}, R.NEGATIVE),
             ({"kv_transfer_s": 0}, {"kv_transfer_s": -0.5}, R.NEGATIVE),
             ({"input_tokens": 5}, {"input_tokens": 2 ** 63 - 1}, R.ABSURD)]           # the widest int64
    assert len(cases) == 9
    for inside, outside, reason in cases:
        records = [record(0, encode([base, {**base, "request_id": "x", **inside}], True))]
        assert len(same_as_rows(records)) == 2, inside
        raw = encode([base, {**base, "request_id": "x", **outside}, base], True)
        assert decoded_events(raw, 10_000) is not None, outside  # not event by event
        d = same_as_row_path([record(0, raw)])
        assert len(d.gens) == 2 and [(r.reason, r.event) for _, r in d.refused] == [(reason, 1)], outside
        lone = same_as_row_path([record(0, encode([{**base, **outside}], False))])
        assert len(lone.gens) == 0 and [r.reason for _, r in lone.refused] == [reason], outside


def test_pd_fields_ride_on_the_columns():
    """A v2 generation's prefill_replica, decode_replica and kv_transfer_s
    are columns as the row path makes them ('' and null when absent), in a
    batch beside generations without them."""
    base = {"schema_version": 2, "kind": "generation", "request_id": "a", "model": "m", "t0": NOW - 60,
            "ttft_s": 0.5, "e2e_s": 2.0, "input_tokens": 1000, "output_tokens": 50}
    pd = {**base, "request_id": "b", "prefill_replica": "p-0", "decode_replica": "d-1", "kv_transfer_s": 0.2}
    records = [record(0, encode([base], False)), record(1, encode([pd], False)),
               record(2, encode([{**pd, "request_id": "c", "prefill_replica": None}, base], True))]
    gens = same_as_rows(records)  # from the C decoder's Structs
    assert [(r["prefill_replica"], r["decode_replica"], r["kv_transfer_s"]) for r in gens] == [
        ("", "", None), ("p-0", "d-1", 0.2), ("", "d-1", 0.2), ("", "", None)]


def test_a_batch_decoded_ahead_serves_only_the_same_records_in_the_same_order():
    events = [{"schema_version": 1, "kind": "generation", "request_id": f"r{i}", "model": "m", "t0": NOW - i,
               "ttft_s": 0.5, "e2e_s": 2.0, "input_tokens": 100, "output_tokens": 3} for i in range(3)]
    records = [record(i, encode([e], False)) for i, e in enumerate(events)]
    ahead = Ahead(records, BUCKET, LIMIT, NOW)
    assert list(ahead.decoded.gens) == list(same_as_rows(records))
    assert ahead.decoded_for(list(records)) is ahead.decoded  # the same records, in a list of the caller's
    assert ahead.decoded_for(records[:2]) is None  # admission dropped one
    assert ahead.decoded_for(records[::-1]) is None
    assert ahead.decoded_for([record(0, records[0].value), *records[1:]]) is None  # equal, not the same record
    assert Ahead([record(0, b"{")], BUCKET, LIMIT, NOW).decoded_for([]) is None


def test_the_retention_bound_gives_the_row_paths_reason():
    oldest = NOW - 90 * 86_400
    base = {"schema_version": 1, "kind": "generation", "request_id": "b", "model": "m", "t0": oldest,
            "ttft_s": 0.5, "e2e_s": 2.0, "input_tokens": 1000, "output_tokens": 50}
    inside = [record(0, encode([base, {**base, "request_id": "x"}], True))]
    assert len(same_as_rows(inside, oldest)) == 2
    outside = [record(0, encode([base, {**base, "request_id": "x", "t0": oldest - 0.01}], True))]
    d = same_as_row_path(outside, oldest)
    assert len(d.gens) == 1 and [r.reason for _, r in d.refused] == ["outside_retention"]
    assert Ahead(inside, BUCKET, LIMIT, NOW, oldest=oldest).decoded_for(inside, oldest + 1) is None  # in its turn


def test_rows_dropped_by_without_leave_the_rest_as_take_gives_them():
    """Generations.without (duplicates and re-reads dropped by a mask) gives
    what a take of the other rows gives: the same rows, sources and counts
    per message, whichever rows go."""
    events = [{"schema_version": 1, "kind": "generation", "request_id": f"r{i}", "model": "m", "t0": NOW - i,
               "ttft_s": 0.5, "e2e_s": 2.0, "input_tokens": 100 * i, "output_tokens": i} for i in range(1, 8)]
    records = [record(5, encode(events[:3], True)), record(9, encode(events[3:4], False)),
               record(6, encode(events[4:], True))]
    gens = same_as_rows(records)
    assert len(gens) == 7
    cases = [{0}, {3}, {0, 1, 2}, {6, 4}, set(range(6)), set()]
    assert len(cases) == 6
    for drop in cases:
        keep = [i for i in range(7) if i not in drop]
        part, taken = gens.without(drop), gens.take(keep)
        assert list(part) == list(taken) == [gens[i] for i in keep], drop
        assert (part.sources, part.per_message, part.request_ids) == (taken.sources, taken.per_message,
                                                                     taken.request_ids), drop
        assert part.ts.tolist() == taken.ts.tolist() and part.arrow().equals(taken.arrow()), drop


def test_a_number_no_float_holds_exactly_is_refused_like_any_out_of_range():
    """cached_input_tokens and the nullable durations are checked as floats:
    2**53 + 1 has no exact float, and a safe cast raised for the whole batch
    instead of refusing that event."""
    base = {"schema_version": 1, "kind": "generation", "request_id": "b", "model": "m", "t0": NOW - 60,
            "ttft_s": 0.5, "e2e_s": 2.0, "input_tokens": 1000, "output_tokens": 50}
    raw = encode([base, {**base, "request_id": "x", "cached_input_tokens": 2 ** 53 + 1}, base], True)
    d = same_as_row_path([record(0, raw)])
    assert len(d.gens) == 2 and [(r.reason, r.event) for _, r in d.refused] == [(R.ABSURD, 1)]
    # A duration keeps its JSON type in the Struct: an int past 2**53 is out of range, not a failed column.
    for name in ("queue_s", "ttft_s"):
        raw = encode([base, {**base, "request_id": "x", name: 2 ** 53 + 1}, base], True)
        d = same_as_row_path([record(0, raw)])
        assert len(d.gens) == 2 and [(r.reason, r.event) for _, r in d.refused] == [(R.ABSURD, 1)], name
    raw = encode([base, {**base, "schema_version": 2, "request_id": "x", "kv_transfer_s": 2 ** 53 + 1}], True)
    assert [(r.reason, r.event) for _, r in same_as_row_path([record(0, raw)]).refused] == [(R.ABSURD, 1)]
