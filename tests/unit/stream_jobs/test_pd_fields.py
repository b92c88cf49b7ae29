"""The prefill/decode fields (prefill_replica, decode_replica, kv_transfer_s)
in the worker: v2 generations and the start/end phases carry them, v1 does
not know them, bad values get their reason code, the transfer lies inside
the time to first token, and the join carries them from whichever phase
knew them into the joined generation."""

from __future__ import annotations

import json
import math

import pytest

from phasemeter.stream_jobs import join
from phasemeter.stream_jobs import reasons as R
from phasemeter.stream_jobs.buckets import Bucketer, parse_edges
from phasemeter.stream_jobs.contract import PD_FIELDS, Rejection
from phasemeter.stream_jobs.formulas import check_transfer_within
from phasemeter.stream_jobs.derive import ROW_COLUMNS, process, process_message
from phasemeter.stream_jobs.batch_decode import answer
from phasemeter.stream_jobs.phase_events import validate_phase

NOW = 1_800_000_000.0
BUCKET = Bucketer(parse_edges("default"))
PD = {"prefill_replica": "prefill-a", "decode_replica": "decode-b", "kv_transfer_s": 0.04}


def gen(**over):
    base = {"schema_version": 2, "kind": "generation", "request_id": "r1", "model": "m", "t0": NOW - 60,
            "ttft_s": 0.5, "e2e_s": 2.5, "input_tokens": 1000, "output_tokens": 101}
    return {**base, **over}


def row(ev):
    return process(json.dumps(ev).encode(), BUCKET, 1_000_000, NOW)


def test_the_row_carries_the_pd_fields_and_stores_them_as_columns():
    r = row(gen(**PD))
    assert (r["prefill_replica"], r["decode_replica"], r["kv_transfer_s"]) == ("prefill-a", "decode-b", 0.04)
    assert set(PD_FIELDS) < set(ROW_COLUMNS)


def test_without_them_the_labels_are_empty_and_the_transfer_null():
    r = row(gen())
    assert (r["prefill_replica"], r["decode_replica"], r["kv_transfer_s"]) == ("", "", None)


def test_v1_does_not_know_them():
    r = row(gen(schema_version=1, prefill_replica="p"))
    assert isinstance(r, Rejection) and r.reason == R.UNKNOWN_FIELD and "v2 only" in r.detail


BAD = [
    ({"prefill_replica": ""}, R.BAD_VALUE),
    ({"decode_replica": "d" * 201}, R.BAD_VALUE),
    ({"decode_replica": 7}, R.WRONG_TYPE),
    ({"prefill_replica": "p\x1b[31m"}, R.CONTROL_CHARACTER),
    ({"kv_transfer_s": -0.01}, R.NEGATIVE),
    ({"kv_transfer_s": "0.1"}, R.WRONG_TYPE),
    ({"kv_transfer_s": True}, R.WRONG_TYPE),
    ({"kv_transfer_s": math.inf}, R.NOT_FINITE),
    ({"kv_transfer_s": 0.6}, R.INCONSISTENT),  # more than ttft_s = 0.5
    ({"kv_transfer_s": 3.0, "ttft_s": None, "output_tokens": 0}, R.INCONSISTENT),  # more than e2e_s
]


@pytest.mark.parametrize("over,reason", BAD, ids=[repr(o)[:40] for o, _ in BAD])
def test_bad_values_are_refused_by_name(over, reason):
    r = row(gen(**over))
    assert isinstance(r, Rejection) and r.reason == reason, r
    assert next(iter(over)) in r.detail


def test_the_transfer_bound():
    assert check_transfer_within(0.5, 0.5, 2.0) is None          # the whole TTFT was the transfer: allowed
    assert check_transfer_within(None, None, 2.0) is None
    assert check_transfer_within(1.9, None, 2.0) is None         # no first token: bounded by e2e_s
    assert check_transfer_within(0.51, 0.5, 2.0).reason == R.INCONSISTENT


def test_the_c_decoder_gives_the_same_answer():
    """An event with P/D fields is not the C decoder's: it gives the full path's result."""
    raws = [json.dumps(gen(**PD)).encode(),
            json.dumps({"schema_version": 2, "kind": "batch", "events": [gen(**PD), gen(request_id="r2")]}).encode(),
            json.dumps(gen(kv_transfer_s=0.9)).encode()]
    assert len(raws) == 3
    for raw in raws:
        assert answer(raw, BUCKET, 1_000_000, NOW) == process_message(raw, BUCKET, 1_000_000, NOW)


def start(**over):
    return {"schema_version": 2, "kind": "start", "request_id": "r1", "model": "m", "t0": NOW - 60,
            "input_tokens": 1000, **over}


def end(**over):
    return {"schema_version": 2, "kind": "end", "request_id": "r1", "output_tokens": 101, "e2e_s": 2.5,
            "ttft_s": 0.5, **over}


def test_phases_carry_them_and_bad_ones_are_refused():
    assert validate_phase(start(prefill_replica="p", kv_transfer_s=0.1), NOW)["kv_transfer_s"] == 0.1
    assert validate_phase(end(decode_replica="d"), NOW)["decode_replica"] == "d"
    assert validate_phase(end(kv_transfer_s=-1), NOW).reason == R.NEGATIVE
    assert validate_phase(start(decode_replica=""), NOW).reason == R.BAD_VALUE
    first = {"schema_version": 2, "kind": "first_token", "request_id": "r1", "ttft_s": 0.5, "decode_replica": "d"}
    assert validate_phase(first, NOW).reason == R.UNKNOWN_FIELD


def test_the_join_takes_each_from_the_phase_that_knew_it():
    ph = {"start": validate_phase(start(prefill_replica="p-1"), NOW),
          "end": validate_phase(end(decode_replica="d-7", kv_transfer_s=0.05), NOW)}
    ev = join.joined_event("r1", ph)
    assert (ev["prefill_replica"], ev["decode_replica"], ev["kv_transfer_s"]) == ("p-1", "d-7", 0.05)
    r = process(json.dumps(ev).encode(), BUCKET, 1_000_000, NOW)
    assert (r["prefill_replica"], r["decode_replica"], r["kv_transfer_s"]) == ("p-1", "d-7", 0.05)
    # the earliest phase wins where both said it
    ph["start"] = validate_phase(start(prefill_replica="p-1", kv_transfer_s=0.01), NOW)
    assert join.joined_event("r1", ph)["kv_transfer_s"] == 0.01
    # a transfer longer than the joined TTFT is refused when the joined generation is derived
    ph["start"] = validate_phase(start(kv_transfer_s=0.9), NOW)
    bad = process(json.dumps(join.joined_event("r1", ph)).encode(), BUCKET, 1_000_000, NOW)
    assert isinstance(bad, Rejection) and bad.reason == R.INCONSISTENT


def test_a_join_without_them_leaves_them_out():
    ph = {"start": validate_phase(start(), NOW), "end": validate_phase(end(), NOW)}
    assert not set(PD_FIELDS) & set(join.joined_event("r1", ph))
