"""/api/pools' pure parts: its parameters, and the page's document built from
the CLI's two JSON documents (`query bands --by`, `latency --by`)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from phasemeter.analytics.live import BadRequest
from phasemeter.analytics.live_pools import NO_POOLS, parse_pools, pool_document

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=timezone.utc)


def test_parse_defaults_to_the_decode_pool_and_the_last_hour():
    req = parse_pools({}, NOW)
    assert req["by"] == "decode_replica" and req["step_s"] is None
    assert (req["end"] - req["start"]).total_seconds() == 3600
    req = parse_pools({"by": ["prefill_replica"], "step": ["5m"], "model": ["a,b"]}, NOW)
    assert (req["by"], req["step_s"], req["models"], req["buckets"]) == ("prefill_replica", 300, ["a", "b"], [])


@pytest.mark.parametrize("query,param", [({"by": ["replica"]}, "by"), ({"by": ["a", "b"]}, "by"),
                                         ({"path": ["exact"]}, "path"), ({"step": ["7x"]}, "step"),
                                         ({"from": ["yesterday"]}, "from")])
def test_parse_names_the_bad_parameter(query, param):
    with pytest.raises(BadRequest) as exc:
        parse_pools(query, NOW)
    assert exc.value.param == param and str(exc.value).startswith(param)


def _row(pool, **kw):
    return {"t": "2026-12-05T11:00:00Z", "model": "m", "decode_replica": pool, "input_bucket": "0-512", **kw}


def test_document_keeps_named_pools_only_and_lists_them_sorted():
    bands = {"step_s": 300, "start": "s", "end": "e", "method": "exact",
             "rows": [_row("decode-2", n=3), _row("", n=9), _row("decode-0", n=1)]}
    latency = {"rows": [_row("decode-0", kv_transfer_n=1), _row("", kv_transfer_n=0), _row("decode-1", kv_transfer_n=2)]}
    doc = pool_document(bands, latency, "decode_replica")
    assert doc["pools"] == ["decode-0", "decode-1", "decode-2"] and "note" not in doc
    assert [r["n"] for r in doc["bands"]] == [3, 1]
    assert [r["kv_transfer_n"] for r in doc["latency"]] == [1, 2]
    assert (doc["by"], doc["step_s"], doc["start"], doc["end"]) == ("decode_replica", 300, "s", "e")


@pytest.mark.parametrize("rows", [[], [_row("", n=4, decode_p50=None)], [_row(None, n=1)]])
def test_document_without_pools_has_the_note_and_no_rows(rows):
    doc = pool_document({"rows": rows}, {"rows": rows}, "decode_replica")
    assert doc["pools"] == [] and doc["bands"] == [] and doc["latency"] == [] and doc["note"] == NO_POOLS
    assert pool_document({}, {}, "prefill_replica")["note"] == NO_POOLS  # an answer with no rows key
