"""Property-based fuzzing of the NDJSON reader (integrations/ndjson.py), as
`phasemeter emit` runs it. The invariant, for any byte stream: every line
read is accepted, refused with a reason code, or blank; the line numbers
are 1..n; nothing raises; an accepted line is one the worker accepts."""

from __future__ import annotations

import io
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from phasemeter.integrations.ndjson import Accepted, LineChecker, Refused, read_lines
from phasemeter.stream_jobs import reasons as R
from phasemeter.stream_jobs.buckets import Bucketer, parse_edges
from phasemeter.stream_jobs.derive import Rejection, process_message

NOW = 1_764_000_000.0
MAX = 2_000
CHECKER = LineChecker(MAX)
GOOD = {"schema_version": 1, "kind": "generation", "request_id": "r1", "model": "m", "t0": NOW - 60,
        "ttft_s": 0.1, "e2e_s": 1.0, "queue_s": None, "input_tokens": 10, "output_tokens": 5,
        "cached_input_tokens": None, "status": "ok", "finish_reason": None, "gateway": None, "replica": None}
VALUES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8),
                   st.sampled_from(["\ud800", "9" * 5000, "", "x" * 300, [], {}, [1], {"a": 1}, 10**400]))


def lines_of(chunks: list[bytes]) -> bytes:
    return b"".join(chunks)


def run(data: bytes) -> list:
    out = []
    for raw in read_lines(io.BytesIO(data), MAX):
        out.append((raw, CHECKER.check(raw, now=NOW)))
    return out


def check(results: list, data: bytes) -> None:
    n = data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
    assert len(results) == n
    assert [raw.lineno for raw, _ in results] == list(range(1, n + 1))
    bucket = Bucketer(parse_edges("default"))
    for raw, result in results:
        assert result is None or isinstance(result, (Accepted, Refused))
        if result is None:
            assert raw.data is not None and not raw.data.strip()
        elif isinstance(result, Refused):
            assert result.rejections and all(r.reason in R.ALL and r.detail for r in result.rejections)
        else:
            again = process_message(result.value, bucket, MAX, NOW)
            assert again and not any(isinstance(r, Rejection) for r in again)


@settings(max_examples=300)
@given(st.lists(st.one_of(st.binary(max_size=60), st.sampled_from([b"\r\n", b"\n", b"\xef\xbb\xbf", b"{", b"}",
                                                                  b'"\\ud800"', b"\xff\xfe", b"x" * 2500])),
                max_size=12))
def test_any_bytes_every_line_is_accepted_refused_or_blank(chunks):
    data = lines_of(chunks)
    check(run(data), data)


@settings(max_examples=300)
@given(st.lists(st.dictionaries(st.sampled_from(sorted(GOOD) + ["prompt", "events", "x"]), VALUES, max_size=4),
                min_size=1, max_size=6),
       st.booleans())
def test_events_with_hostile_values_are_accepted_or_refused_with_a_reason(changes, envelope):
    events = [{**GOOD, "request_id": f"r{i}", **c} for i, c in enumerate(changes)]
    try:
        if envelope:
            docs = [json.dumps({"schema_version": 2, "kind": "batch", "events": events})]
        else:
            docs = [json.dumps(e) for e in events]
    except ValueError:  # an int json itself cannot write
        return
    data = ("\n".join(docs) + "\n").encode("utf-8", "surrogatepass")
    check(run(data), data)
