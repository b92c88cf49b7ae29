"""The optional `streamed` field of a v2 generation: false says the call was
not streamed (the client saw the whole answer at once), so there is no first
token to time. Such a row is stored with null phases instead of being
refused "output_tokens > 0 but no first token"; absent or true, that check
still refuses it. One definition (formulas.CHECKS), on a batch of one row
(derive.validate) and on columns (batch_decode.decode)."""

from __future__ import annotations

import json

import pytest

from phasemeter.stream_jobs import reasons as R
from phasemeter.stream_jobs.contract import Rejection
from phasemeter.stream_jobs.derive import ROW_COLUMNS, process, process_message, validate
from phasemeter.stream_jobs.batch_decode import answer
from tests.unit.stream_jobs.test_columnar import LIMIT, encode, record, same_as_row_path, same_as_rows
from tests.unit.stream_jobs.test_derive_properties import BUCKET, NOW


def gen(**over):
    base = {"schema_version": 2, "kind": "generation", "request_id": "r1", "model": "m", "t0": NOW - 60,
            "ttft_s": None, "e2e_s": 2.5, "input_tokens": 1000, "output_tokens": 101}
    return {**base, **over}


def row(ev):
    return process(json.dumps(ev).encode(), BUCKET, 1_000_000, NOW)


def test_a_call_not_streamed_is_stored_with_null_phases():
    r = row(gen(streamed=False))
    assert not isinstance(r, Rejection), r
    assert r["streamed"] == 0 and "streamed" in ROW_COLUMNS
    assert (r["ttft_s"], r["prefill_tps"], r["decode_tps"], r["tpot_s"]) == (None, None, None, None)
    assert (r["e2e_s"], r["output_tokens"]) == (2.5, 101)  # latency's e2e and the counts keep it


@pytest.mark.parametrize("over", [{}, {"streamed": True}, {"streamed": None}])
def test_without_it_or_streamed_the_missing_first_token_is_still_refused(over):
    r = row(gen(**over))
    assert isinstance(r, Rejection) and r.reason == R.INCONSISTENT and "no first token" in r.detail


def test_the_row_says_what_the_event_said():
    assert row(gen(ttft_s=0.5))["streamed"] is None
    assert row(gen(ttft_s=0.5, streamed=True))["streamed"] == 1
    # an engine's span of a call it did not stream may still time its first token
    assert row(gen(ttft_s=0.5, streamed=False))["streamed"] == 0


@pytest.mark.parametrize("value", ["false", 0, 1, "no"])
def test_a_wrong_type_is_refused_by_name(value):
    r = row(gen(streamed=value))
    assert isinstance(r, Rejection) and r.reason == R.WRONG_TYPE and "streamed" in r.detail


def test_v1_does_not_know_it():
    r = row(gen(schema_version=1, streamed=False))
    assert isinstance(r, Rejection) and r.reason == R.UNKNOWN_FIELD and "v2 only" in r.detail


def test_validate_is_a_batch_of_one():
    assert validate(gen(streamed=False), NOW)["streamed"] is False
    assert isinstance(validate(gen(), NOW), Rejection)


def test_the_c_decoder_gives_the_same_answer():
    raws = [json.dumps(gen(streamed=False)).encode(), json.dumps(gen(streamed=True)).encode(),
            json.dumps({"schema_version": 2, "kind": "batch",
                        "events": [gen(streamed=False), gen(request_id="r2", ttft_s=0.5)]}).encode(),
            json.dumps(gen(schema_version=1, streamed=False)).encode()]
    assert len(raws) == 4
    for raw in raws:
        assert answer(raw, BUCKET, 1_000_000, NOW) == process_message(raw, BUCKET, 1_000_000, NOW)


def test_the_columns_take_it_as_the_row_path_does():
    base = gen(ttft_s=0.5)
    records = [record(0, encode([base], False)), record(1, encode([gen(request_id="b", streamed=False)], False)),
               record(2, encode([{**base, "request_id": "c", "streamed": True}, base], True))]
    gens = same_as_rows(records)  # from the C decoder's Structs
    assert [(r["request_id"], r["streamed"], r["prefill_tps"]) for r in gens] == [
        ("r1", None, 2000.0), ("b", 0, None), ("c", 1, 2000.0), ("r1", None, 2000.0)]
    refused = [record(0, encode([base, gen(request_id="x", streamed=True)], True))]
    d = same_as_row_path(refused)
    assert len(d.gens) == 1 and [m for m, _ in d.refused] == [0]
