"""Fill the rollup's tiers from raw rows (their materialized views only see
rows inserted after they were created).

* The minute tier: idempotent per (model, bucket, minute): cells the rollup
  already holds are skipped (phasemeter.store.rollup.backfill).
* The hour and day tiers: over the window widened to whole hours / days,
  every cell unequal to raw is rebuilt from raw (phasemeter.store.rollup.repair,
  the worker's crash repair). Skipping held cells would not do there: the
  hour (day) in which a tier's migration ran is held but partial, and
  `query bands` would read it once its tier is in use.

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
    """Returns {"start", "end", "generations_added", "tier_cells_rebuilt"}:
    rows of `generations` newly covered by the minute tier, and per coarser
    tier the cells found unequal to raw and rebuilt."""
    lo, hi = align_minutes(start, end)
    before = rollup_rows(client, lo, hi)
    rollup.backfill(client, _naive(lo), _naive(hi))
    after = rollup_rows(client, lo, hi)
    rebuilt = {}
    for tier in rollup.COARSE:
        t_lo, t_hi = tier.floor(lo), tier.ceil(hi)
        rebuilt[tier.name] = len(rollup.repair(client, tier, t_lo, t_hi))
    return {"start": lo.isoformat(), "end": hi.isoformat(), "generations_added": after - before,
            "tier_cells_rebuilt": rebuilt}
