"""The poison corpus: distinct kinds of bad input, each with the reason code
the worker must give it. Shared by the unit tests (pure pipeline) and the
integration test that pushes every item through the real broker and worker.
"""

import json
import time

from phasemeter.stream_jobs import reasons as R

NOW_REF = time.time()  # valid apart from their one flaw, also for a real worker


def event(**over):
    base = {"schema_version": 1, "kind": "generation", "request_id": "r1", "model": "m",
            "t0": NOW_REF - 60, "ttft_s": 0.5, "e2e_s": 2.5, "input_tokens": 1000, "output_tokens": 101}
    base.update(over)
    return {k: v for k, v in base.items() if v is not ...}


def phase(kind, **over):
    base = {"schema_version": 2, "kind": kind, "request_id": "r1"}
    base.update({"start": {"model": "m", "t0": NOW_REF - 60, "input_tokens": 1000},
                 "first_token": {"ttft_s": 0.5}, "end": {"e2e_s": 2.5, "output_tokens": 101}}[kind])
    base.update(over)
    return {k: v for k, v in base.items() if v is not ...}


def as_bytes(payload) -> bytes:
    return payload if isinstance(payload, bytes) else json.dumps(payload).encode()


POISON = [
    ("oversize", b"{" + b" " * 1_000_001 + b"}", R.OVERSIZE),
    ("not utf8", b"\xff\xfe{}", R.NOT_UTF8),
    ("malformed", b"{\"a\": ", R.MALFORMED_JSON),
    # valid JSON, but no field holds an integer of 5,000 digits (Python's json
    # refuses past 4,300 with a ValueError that once escaped as internal_error)
    ("5000-digit number", as_bytes(event()).replace(b'"input_tokens": 1000', b'"input_tokens": ' + b"9" * 5000),
     R.ABSURD),
    ("empty bytes", b"", R.MALFORMED_JSON),
    ("array", b"[1,2]", R.NOT_OBJECT),
    ("number", b"42", R.NOT_OBJECT),
    ("null", b"null", R.NOT_OBJECT),
    ("unknown version", event(schema_version=3), R.UNKNOWN_VERSION),
    ("version as string", event(schema_version="1"), R.UNKNOWN_VERSION),
    ("version bool", event(schema_version=True), R.UNKNOWN_VERSION),
    ("missing version", event(schema_version=...), R.UNKNOWN_VERSION),
    ("bad kind", event(kind="gen"), R.BAD_KIND),
    ("phase kind in a v1 event", phase("start", schema_version=1), R.UNKNOWN_VERSION),
    ("internal orphan kind from outside", event(schema_version=2, kind="orphan", reason="x"), R.BAD_KIND),
    ("gateway claims abandoned", event(status="abandoned"), R.BAD_VALUE),
    ("start missing model", phase("start", model=...), R.MISSING_FIELD),
    ("start missing request_id", phase("start", request_id=...), R.MISSING_FIELD),
    ("first_token without a time", phase("first_token", ttft_s=...), R.MISSING_FIELD),
    ("first_token with both clocks", phase("first_token", t_first=NOW_REF), R.INCONSISTENT),
    ("first_token before t0", phase("first_token", ttft_s=-0.2), R.IMPOSSIBLE_ORDER),
    ("end without output tokens", phase("end", output_tokens=...), R.MISSING_FIELD),
    ("end abandoned from outside", phase("end", status="abandoned"), R.BAD_VALUE),
    ("end t_end in ms", phase("end", e2e_s=..., t_end=NOW_REF * 1000), R.ABSURD),
    ("phase prompt smuggled", phase("start", prompt="secret"), R.UNKNOWN_FIELD),
    ("start cached above input", phase("start", cached_input_tokens=1001), R.INCONSISTENT),
    ("missing model", event(model=...), R.MISSING_FIELD),
    ("missing t0", event(t0=...), R.MISSING_FIELD),
    ("missing e2e", event(e2e_s=...), R.MISSING_FIELD),
    ("missing input tokens", event(input_tokens=...), R.MISSING_FIELD),
    ("prompt text smuggled", event(prompt="secret text"), R.UNKNOWN_FIELD),
    ("model not string", event(model=5), R.WRONG_TYPE),
    ("tokens as string", event(input_tokens="1000"), R.WRONG_TYPE),
    ("tokens float", event(input_tokens=10.5), R.WRONG_TYPE),
    ("tokens bool", event(output_tokens=True), R.WRONG_TYPE),
    ("ttft string", event(ttft_s="0.5"), R.WRONG_TYPE),
    ("empty model", event(model=""), R.BAD_VALUE),
    ("huge model name", event(model="m" * 201), R.BAD_VALUE),
    ("bad status", event(status="weird"), R.BAD_VALUE),
    ("NaN ttft", b'{"schema_version":1,"kind":"generation","request_id":"r","model":"m","t0":1799999000,'
                 b'"ttft_s":NaN,"e2e_s":1,"input_tokens":1,"output_tokens":1}', R.NOT_FINITE),
    ("Infinity e2e", b'{"schema_version":1,"kind":"generation","request_id":"r","model":"m","t0":1799999000,'
                     b'"ttft_s":0.1,"e2e_s":Infinity,"input_tokens":1,"output_tokens":1}', R.NOT_FINITE),
    ("negative tokens", event(output_tokens=-1), R.NEGATIVE),
    ("too many tokens", event(input_tokens=10_000_001), R.ABSURD),
    ("huge integer", event(input_tokens=10**40), R.ABSURD),
    ("duration over a day", event(e2e_s=90_000.0), R.ABSURD),
    ("t0 in ms", event(t0=NOW_REF * 1000), R.ABSURD),
    ("t0 zero", event(t0=0), R.ABSURD),
    ("t_first before t0", event(ttft_s=-0.1), R.IMPOSSIBLE_ORDER),
    ("t_end before t_first", event(ttft_s=3.0, e2e_s=2.0), R.IMPOSSIBLE_ORDER),
    ("scheduled after first token", event(queue_s=1.0), R.IMPOSSIBLE_ORDER),
    ("tokens without first token", event(ttft_s=None, output_tokens=5), R.INCONSISTENT),
    ("cached above input", event(cached_input_tokens=1001), R.INCONSISTENT),
    # the optional v2 fields (chunk data, estimated count): v2 generation and end only
    ("v1 with chunk data", event(chunks=3, max_gap_s=0.2), R.UNKNOWN_FIELD),
    ("v1 with estimated count", event(output_tokens_estimated=True), R.UNKNOWN_FIELD),
    ("start with chunk data", phase("start", chunks=3), R.UNKNOWN_FIELD),
    ("chunks negative", event(schema_version=2, chunks=-1), R.NEGATIVE),
    ("chunks float", phase("end", chunks=2.5), R.WRONG_TYPE),
    ("max_gap_s string", event(schema_version=2, chunks=3, max_gap_s="0.4"), R.WRONG_TYPE),
    ("max_gap_s negative", phase("end", chunks=3, max_gap_s=-0.1), R.NEGATIVE),
    ("max_gap_s over a day", event(schema_version=2, chunks=3, max_gap_s=90_000.0), R.ABSURD),
    ("gap threshold negative", event(schema_version=2, chunks=3, gaps_over=0, gap_threshold_s=-0.5),
     R.NEGATIVE),
    ("estimated not a bool", event(schema_version=2, output_tokens_estimated=1), R.WRONG_TYPE),
    ("gaps_over without threshold", event(schema_version=2, chunks=3, gaps_over=1), R.INCONSISTENT),
    ("max_gap_s without chunks", phase("end", max_gap_s=0.3), R.INCONSISTENT),
    ("gaps_over above chunks", event(schema_version=2, chunks=2, gaps_over=3, gap_threshold_s=0.5),
     R.INCONSISTENT),
    ("max_gap_s longer than e2e", phase("end", chunks=3, max_gap_s=3.0), R.INCONSISTENT),
    # json.dumps escapes a lone surrogate as "\ud800": valid JSON, valid
    # UTF-8 bytes, but text no UTF-8 encoder (Arrow, the store) accepts.
    ("lone surrogate in request_id", event(request_id="r\ud800"), R.NOT_UTF8),
    ("lone low surrogate in model", event(model="m\udfff"), R.NOT_UTF8),
    ("lone surrogate in gateway", event(gateway="gw\udc00x"), R.NOT_UTF8),
    ("lone surrogate in a field name", event(**{"x\ud800": 1}), R.NOT_UTF8),
    ("lone surrogate in a phase", phase("start", model="m\ud83d"), R.NOT_UTF8),
    ("lone surrogate in a bad status", event(status="\ud800"), R.NOT_UTF8),
]


