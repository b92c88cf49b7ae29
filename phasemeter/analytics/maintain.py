"""Fill the per-minute rollup from raw rows (the materialized view only sees
rows inserted after it was created). Idempotent per (model, bucket, minute):
cells the rollup already holds are skipped (phasemeter.store.rollup).

It writes, so it runs directly against the store, never through the worker's
read-only HTTP API: with an embedded (chDB) store, stop the worker first.
"""

from __future__ import annotations

from datetime import datetime

from phasemeter.store import rollup
from phasemeter.store.client import load_sql

from phasemeter.analytics.core import _naive, align_minutes


def rollup_rows(client, start: datetime, end: datetime) -> int:
    lo, hi = align_minutes(start, end)
    res = client.query(load_sql("analytics_rollup_count"), parameters={"start": _naive(lo), "end": _naive(hi)})
    return int(res.result_rows[0][0] or 0)


def backfill(client, start: datetime, end: datetime) -> dict:
    """Returns {"start", "end", "generations_added"}: rows of `generations` newly covered."""
    lo, hi = align_minutes(start, end)
    before = rollup_rows(client, lo, hi)
    rollup.backfill(client, _naive(lo), _naive(hi))
    after = rollup_rows(client, lo, hi)
    return {"start": lo.isoformat(), "end": hi.isoformat(), "generations_added": after - before}
