"""The optional v2 fields (chunks, max_gap_s, gaps_over, gap_threshold_s,
output_tokens_estimated) in the worker: v1 stays as strict as before, v2
generations and `end` phases carry them, bad values get their reason code,
derive turns them into row columns, and the join carries them from the end
into the joined generation."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phasemeter.stream_jobs import join
from phasemeter.stream_jobs import reasons as R
from phasemeter.stream_jobs.buckets import Bucketer, parse_edges
from phasemeter.stream_jobs.contract import V2_OPTIONAL
from phasemeter.stream_jobs.derive import process, process_message
from phasemeter.stream_jobs.batch_decode import answer
from phasemeter.stream_jobs.phase_events import validate_phase
from tests.unit.stream_jobs.test_fast_decode import in_c

NOW = 1_800_000_000.0
BUCKET = Bucketer(parse_edges("default"))
CHUNKY = {"chunks": 40, "max_gap_s": 0.9, "gaps_over": 2, "gap_threshold_s": 0.5}


def gen(**over):
    base = {"schema_version": 2, "kind": "generation", "request_id": "r1", "model": "m", "t0": NOW - 60,
            "ttft_s": 0.5, "e2e_s": 2.5, "input_tokens": 1000, "output_tokens": 101}
    return {**base, **over}


def row(ev):
    return process(json.dumps(ev).encode(), BUCKET, 1_000_000, NOW)


def test_row_columns_from_chunk_data():
    r = row(gen(**CHUNKY, output_tokens_estimated=True))
    assert (r["max_gap_s"], r["stalled"], r["chunks"], r["gap_threshold_s"], r["output_tokens_estimated"]) \
        == (0.9, 1, 40, 0.5, 1)
    assert row(gen(**{**CHUNKY, "gaps_over": 0}))["stalled"] == 0


@pytest.mark.parametrize("version", [1, 2])
def test_without_chunk_data_stalled_is_null_not_false(version):
    r = row(gen(schema_version=version))
    assert (r["max_gap_s"], r["stalled"], r["chunks"], r["gap_threshold_s"], r["output_tokens_estimated"]) \
        == (None, None, None, None, 0)


def test_chunks_without_gap_count_is_not_a_stall_verdict():
    r = row(gen(chunks=5))
    assert r["chunks"] == 5 and r["stalled"] is None


@pytest.mark.parametrize("name", V2_OPTIONAL)
def test_v1_rejects_each_field_even_null(name):
    for value in (None, 1, True):
        [res] = process_message(json.dumps(gen(schema_version=1, **{name: value})).encode(), BUCKET, 1_000_000, NOW)
        assert res.reason == R.UNKNOWN_FIELD and name in res.detail and "v2 only" in res.detail


def test_not_finite_gap_is_rejected():
    raw = json.dumps(gen(chunks=3)).encode()[:-1] + b', "max_gap_s": NaN}'
    [res] = process_message(raw, BUCKET, 1_000_000, NOW)
    assert res.reason == R.NOT_FINITE and "max_gap_s" in res.detail


@pytest.mark.parametrize("over,reason", [
    ({"chunks": "3"}, R.WRONG_TYPE), ({"chunks": True}, R.WRONG_TYPE), ({**CHUNKY, "gaps_over": -1}, R.NEGATIVE),
    ({"output_tokens_estimated": "yes"}, R.WRONG_TYPE), ({"output_tokens_estimated": 0}, R.WRONG_TYPE),
    ({"gap_threshold_s": 1e6}, R.ABSURD), ({"gaps_over": 1, "gap_threshold_s": 0.5}, R.INCONSISTENT),
])
def test_bad_values_have_reasons_on_generation_and_end(over, reason):
    ev = gen(**over)
    assert row(ev).reason == reason
    end = {"schema_version": 2, "kind": "end", "request_id": "r1", "output_tokens": 3, "e2e_s": 2.5,
           **{k: v for k, v in ev.items() if k in V2_OPTIONAL}}
    assert validate_phase(end, NOW).reason == reason


def test_the_c_decoder_leaves_v2_fields_to_the_full_path():
    chunky, plain = json.dumps(gen(**CHUNKY)).encode(), json.dumps(gen()).encode()
    assert not in_c(chunky) and isinstance(process_message(chunky, BUCKET, 10**6, NOW)[0], dict)
    assert in_c(plain)
    for raw in (chunky, plain):
        assert answer(raw, BUCKET, 10**6, NOW) == process_message(raw, BUCKET, 10**6, NOW)


def test_end_phase_carries_fields_and_join_passes_them_on():
    t0 = NOW - 60
    phases = [{"kind": "start", "request_id": "r1", "model": "m", "t0": t0, "input_tokens": 10},
              {"kind": "first_token", "request_id": "r1", "ttft_s": 0.5}]
    end = validate_phase({"schema_version": 2, "kind": "end", "request_id": "r1", "output_tokens": 7,
                          "e2e_s": 2.5, **CHUNKY, "output_tokens_estimated": True}, NOW)
    assert {k: end[k] for k in V2_OPTIONAL} == {**CHUNKY, "output_tokens_estimated": True}
    entry = None
    for p in phases + [end]:
        entry, outputs, what = join.apply(entry, "r1", p, 0, NOW)
    assert what == "joined"
    [(_, joined)] = outputs
    assert {k: joined[k] for k in V2_OPTIONAL} == {**CHUNKY, "output_tokens_estimated": True}
    r = process_message(json.dumps(joined).encode(), BUCKET, 1_000_000, NOW, internal=True)[0]
    assert (r["stalled"], r["max_gap_s"], r["output_tokens_estimated"]) == (1, 0.9, 1)


def test_join_without_fields_adds_none():
    entry = None
    for p in ({"kind": "start", "request_id": "r", "model": "m", "t0": NOW - 9, "input_tokens": 1},
              {"kind": "end", "request_id": "r", "output_tokens": 0, "e2e_s": 1.0}):
        entry, outputs, _ = join.apply(entry, "r", p, 0, NOW)
    assert not set(V2_OPTIONAL) & set(outputs[0][1])  # stays on the ingest's fast path


@st.composite
def chunk_stats(draw):
    e2e = draw(st.floats(0.0, 3600.0, allow_nan=False))
    chunks = draw(st.integers(0, 10_000))
    over = draw(st.integers(0, chunks))
    gap = draw(st.one_of(st.none(), st.floats(0.0, e2e, allow_nan=False)))
    return e2e, {"chunks": chunks, "max_gap_s": gap, "gaps_over": over,
                 "gap_threshold_s": draw(st.floats(0.0, 60.0, allow_nan=False)),
                 "output_tokens_estimated": draw(st.sampled_from([None, False, True]))}


@settings(max_examples=200)
@given(chunk_stats(), st.integers(-3, 3), st.floats(0.0, 2.0, allow_nan=False))
def test_property_consistent_stats_derive_and_inconsistent_ones_are_rejected(stats, d_over, d_gap):
    e2e, fields = stats
    ev = gen(ttft_s=0.0, e2e_s=e2e, **fields)
    r = row(ev)
    assert r["stalled"] == int(fields["gaps_over"] > 0) and r["chunks"] == fields["chunks"]
    assert r["output_tokens_estimated"] == int(bool(fields["output_tokens_estimated"]))
    # push gaps_over / max_gap_s past their bounds: always `inconsistent`
    over = fields["gaps_over"] + d_over
    if over > fields["chunks"]:
        assert row({**ev, "gaps_over": over}).reason == R.INCONSISTENT
    if fields["max_gap_s"] is not None and d_gap > 0 and e2e + d_gap > e2e:
        assert row({**ev, "max_gap_s": e2e + d_gap}).reason == R.INCONSISTENT
