"""Reading and checking NDJSON lines: the worker's verdict, line by line."""

from __future__ import annotations

import io
import json
import time
import tracemalloc

import pytest
from corpus import POISON, as_bytes, event, phase  # tests/corpus.py: the worker's poison corpus

from phasemeter.integrations.ndjson import Accepted, LineChecker, RawLine, Refused, read_lines
from phasemeter.stream_jobs import reasons as R
from phasemeter.stream_jobs.buckets import Bucketer, parse_edges
from phasemeter.stream_jobs.derive import Rejection, process_message

MAX = 1_000_000


def lines(data: bytes, max_bytes: int = MAX) -> list[RawLine]:
    return list(read_lines(io.BytesIO(data), max_bytes))


def test_line_ends_numbers_and_a_last_line_without_newline():
    got = lines(b'a\n\r\nb\r\n\n  \nc')
    assert [(x.lineno, x.data) for x in got] == [(1, b"a"), (2, b""), (3, b"b"), (4, b""), (5, b"  "), (6, b"c")]
    assert lines(b"") == [] and lines(b"\n") == [RawLine(1, b"", 0)]


def test_a_byte_order_mark_is_dropped_on_line_one_only():
    got = lines(b"\xef\xbb\xbfx\n\xef\xbb\xbfy\n")
    assert [x.data for x in got] == [b"x", b"\xef\xbb\xbfy"]


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b""])
def test_an_oversize_line_is_skipped_by_size_and_the_next_line_keeps_its_number(eol):
    limit = 100
    data = b"ok\n" + b"x" * 1000 + eol + (b"after\n" if eol else b"")
    got = lines(data, limit)
    assert got[0] == RawLine(1, b"ok", 2)
    assert got[1].lineno == 2 and got[1].data is None and got[1].size == 1000
    assert [(x.lineno, x.data) for x in got[2:]] == ([(3, b"after")] if eol else [])


def test_the_limit_is_the_workers_exactly():
    checker = LineChecker(50)
    at, over = lines(b"{" + b" " * 48 + b"}\n" + b"{" + b" " * 49 + b"}\n", 50)
    assert at.size == 50 and over.size == 51
    assert checker.check(at).reason == R.UNKNOWN_VERSION  # "{ ... }" is an object: checked, not oversize
    assert checker.check(over).reason == R.OVERSIZE and checker.check(over).detail == "51 bytes > limit 50"


def test_memory_stays_bounded_on_a_huge_line():
    huge = b'{"model": "' + b"m" * 30_000_000 + b'"}\n' + json.dumps(event()).encode() + b"\n"
    checker = LineChecker(MAX)
    stream = io.BytesIO(huge)
    tracemalloc.start()
    try:
        results = [checker.check(x) for x in read_lines(stream, MAX)]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert results[0].reason == R.OVERSIZE and results[0].detail == f"{30_000_013} bytes > limit {MAX}"
    assert isinstance(results[1], Accepted) and results[1].lineno == 2
    assert peak < 3 * MAX  # the line is skipped in chunks, never held whole


def test_every_poison_item_is_refused_with_the_workers_reason():
    """One line per item of the worker's own poison corpus (tests/corpus.py)."""
    items = [(name, as_bytes(p), reason) for name, p, reason in POISON if as_bytes(p).strip()]
    assert items and all(b"\n" not in raw for _, raw, _ in items)  # the corpus, but its blank items
    data = b"\n".join(raw for _, raw, _ in items) + b"\n"
    checker, now = LineChecker(MAX), time.time()
    bucket = Bucketer(parse_edges("default"))
    for (name, raw, reason), line in zip(items, read_lines(io.BytesIO(data), MAX), strict=True):
        got = checker.check(line, now)
        assert isinstance(got, Refused), name
        assert got.reason == reason, name
        if line.data is not None:  # and it is the worker's own verdict, detail included
            (worker,) = process_message(raw, bucket, MAX, now)
            assert isinstance(worker, Rejection) and (got.reason, got.detail) == (worker.reason, worker.detail)


def test_blank_lines_are_skipped_not_refused():
    checker = LineChecker(MAX)
    assert [checker.check(x) for x in lines(b"\n   \n\t\r\n")] == [None, None, None]


def test_keys_follow_the_emitters_rule():
    checker = LineChecker(MAX)
    env = {"schema_version": 2, "kind": "batch", "events": [phase("start", request_id="a"), event(request_id="b")]}
    env1 = {"schema_version": 1, "kind": "batch", "events": [event(request_id="c")]}
    data = b"\n".join(json.dumps(x).encode() for x in (event(request_id="g1"), phase("end", request_id="p1"),
                                                       env, env1))
    got = [checker.check(x) for x in lines(data)]
    assert all(isinstance(x, Accepted) for x in got)
    assert [(x.key, x.events) for x in got] == [(b"g1", 1), (b"p1", 1), (None, 2), (None, 1)]
    assert got[0].value == json.dumps(event(request_id="g1")).encode()  # sent byte for byte


def test_an_envelope_with_one_bad_event_is_refused_whole_with_each_reason():
    env = {"schema_version": 2, "kind": "batch",
           "events": [event(request_id="ok"), event(model=""), phase("end", output_tokens=...)]}
    (got,) = [LineChecker(MAX).check(x) for x in lines(json.dumps(env).encode())]
    assert isinstance(got, Refused)
    assert [(r.reason, r.detail.split(":")[0]) for r in got.rejections] == \
        [(R.BAD_VALUE, "events[1]"), (R.MISSING_FIELD, "events[2]")]


def test_bad_settings_are_refused_clearly():
    with pytest.raises(ValueError, match="max_bytes"):
        LineChecker(0)
    with pytest.raises(ValueError, match="bucket edges"):
        LineChecker(MAX, "5,1")
