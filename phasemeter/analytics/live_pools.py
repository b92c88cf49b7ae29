"""The live page's per-pool view (prefill/decode disaggregated serving):
`/api/pools` runs `phasemeter query bands --by POOL` and `phasemeter latency
--by POOL` (run_query and the CLI's JSON renderer, so sql/bands_by_pool.sql
and sql/latency_by_pool.sql, nothing of its own) over the page's window and
filters, and hands back both documents with the pools they hold.

A row of no pool (pool '': a unified server's generation) belongs to no pool
and is not shown; a window with no pool at all answers 200 with `pools: []`
and a `note` saying so (docs/live.md), never an error.
`pool_document` is the pure part: two CLI documents in, the page's document out.
"""

from __future__ import annotations

import json
from datetime import datetime

from phasemeter.timeparse import ArgError

from phasemeter.analytics.core import run_query
from phasemeter.analytics.live import BadRequest, _as_bad_request, _known, _many, _one, _step, _window, refused
from phasemeter.analytics.present import render
from phasemeter.analytics.variants import BY_CHOICES

POOL_PARAMS = ("from", "to", "step", "model", "bucket", "by")
# What the page says instead of an empty view (docs/live.md).
NO_POOLS = ("no prefill/decode pools in this window: no generation names a prefill_replica or "
            "decode_replica (a unified server; docs/phases.md, disaggregated serving)")


def parse_pools(query, now: datetime | None = None) -> dict:
    """/api/pools' parameters: the bands' window, step and filters, and `by`
    (prefill_replica or decode_replica: the pool each row is counted in)."""
    _known(query, POOL_PARAMS)
    start, end = _window(query, now)
    step = _one(query, "step", "auto")
    by = _one(query, "by", "decode_replica")
    if by not in BY_CHOICES:
        raise BadRequest("by", f"by {by!r}: expected one of {', '.join(BY_CHOICES)}")
    return {"start": start, "end": end, "step_s": None if step == "auto" else _step(step, start, end),
            "models": _many(query, "model"), "buckets": _many(query, "bucket"), "by": by}


def pool_document(bands: dict, latency: dict, by: str) -> dict:
    """The page's document from the CLI's two JSON documents (`query bands --by`,
    `latency --by`, same window and step): their rows of a named pool only,
    the pools (sorted), and the note when there is none."""
    def named(doc):
        return [r for r in doc.get("rows", []) if r.get(by)]

    band_rows, latency_rows = named(bands), named(latency)
    pools = sorted({r[by] for r in band_rows} | {r[by] for r in latency_rows})
    doc = {"by": by, "pools": pools, "step_s": bands.get("step_s"), "start": bands.get("start"),
           "end": bands.get("end"), "method": bands.get("method"), "bands": band_rows,
           "latency": latency_rows}
    if not pools:
        doc["note"] = NO_POOLS
    return doc


def pools(runner, query, edges: str, now: datetime | None = None) -> tuple[int, dict]:
    """(status, payload) of /api/pools. Blocking: the worker runs it in an executor."""
    try:
        req = parse_pools(query, now)
        args = (runner, req["start"], req["end"])
        kw = {"default_edges": edges, "by": req["by"]}  # --by answers from raw rows: the exact path
        bands_df, bands_meta = run_query(*args, req["step_s"], req["models"], req["buckets"], kind="bands", **kw)
        # The latency at the bands' step (an auto step is chosen once), so the two line up.
        latency_df, latency_meta = run_query(*args, bands_meta["step_s"], req["models"], req["buckets"],
                                             kind="latency", **kw)
    except BadRequest as exc:
        return refused(exc)
    except ArgError as exc:
        return refused(_as_bad_request(exc))
    doc = pool_document(json.loads(render(bands_df, "json", bands_meta)),
                        json.loads(render(latency_df, "json", latency_meta)), req["by"])
    doc["bucket_order"] = bands_meta["bucket_order"]
    return 200, doc
