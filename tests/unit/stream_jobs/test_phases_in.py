"""The phases topic read as an input: every pair checked again, junk turned
into orphan records with a reason (dead letters through ingest), never an
exception that stops the join agent."""

from __future__ import annotations

import json

import pytest

from phasemeter.stream_jobs import reasons as R
from phasemeter.stream_jobs.join import JOINED_IN_INGEST
from phasemeter.stream_jobs.join_agent import phase_envelopes
from phasemeter.stream_jobs.phases_in import read_phases

NOW = 1_764_000_000.0
START = {"kind": "start", "request_id": "a", "model": "m", "t0": NOW - 5, "input_tokens": 10}
END = {"kind": "end", "request_id": "a", "e2e_s": 1.0, "output_tokens": 0}
NOTE = {"kind": JOINED_IN_INGEST, "request_id": "b", "kinds": ["start", "end"]}


def test_what_ingest_forwards_is_read_back_whole():
    [(_, raw)] = phase_envelopes([(0, NOW, START), (0, NOW + 1, END), (0, NOW + 2, NOTE)])
    pairs, refused = read_phases(raw, NOW)
    assert refused == [] and pairs == [(NOW, START), (NOW + 1, END), (NOW + 2, NOTE)]


@pytest.mark.parametrize("raw, reason", [
    (b"{not json", R.MALFORMED_JSON), (b"", R.NOT_OBJECT), (None, R.NOT_OBJECT), (b"\xff\xfe\x00", R.MALFORMED_JSON),
    (b"[1, 2]", R.NOT_OBJECT), (b'{"phases": 5}', R.NOT_OBJECT), (b'{"phases": [], "x": 1}', R.NOT_OBJECT),
    (b'{"a":' * 50_000 + b"1" + b"}" * 50_000, R.MALFORMED_JSON),
])
def test_a_message_that_is_no_list_of_phases_is_one_orphan_with_nothing_of_it(raw, reason):
    pairs, [(rid, record)] = read_phases(raw, NOW)
    assert pairs == [] and rid == "" and record["kind"] == "orphan"
    assert record["reason"] == reason and record["phases"] == {}


@pytest.mark.parametrize("item, reason", [
    ([1, 2], R.WRONG_TYPE), (["x", START], R.WRONG_TYPE), ([True, START], R.WRONG_TYPE),
    ([NOW, {**START, "request_id": 5}], R.WRONG_TYPE), ([NOW, {**START, "model": None}], R.MISSING_FIELD),
    ([NOW, {**START, "prompt": "secret"}], R.UNKNOWN_FIELD), ([NOW, {**START, "kind": "nope"}], R.BAD_KIND),
    ([NOW, {**NOTE, "kinds": ["x"]}], R.BAD_VALUE), ([NOW, {**END, "e2e_s": -1}], R.IMPOSSIBLE_ORDER),
])
def test_a_bad_pair_is_refused_alone_and_its_neighbours_are_joined(item, reason):
    raw = json.dumps({"phases": [[NOW, START], item, [NOW, END]]}).encode()
    pairs, [(_, record)] = read_phases(raw, NOW)
    assert pairs == [(NOW, START), (NOW, END)]
    assert record["reason"] == reason and record["detail"].startswith("phases[1]: ")
