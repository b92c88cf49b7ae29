"""The declared SLOs in the store: what the per-minute SLO view counts.

The worker calls `register` at start with its SLO file (PHASEMETER_SLOS),
before it writes any row: SLOs new to the store are inserted (the view
counts every row inserted from then on), SLOs no longer declared are
retired. Rows of data, not DDL. `registered` tells the query layer since
when each SLO is counted, so the rollup path only answers windows it fully
covers (docs/slo.md).
"""

from __future__ import annotations

from datetime import datetime, timezone

from phasemeter.alerts.slo_rules import OBJECTIVES, SloSet
from phasemeter.store.client import load_sql

def registered(client) -> dict[int, datetime]:
    """slo_id -> the first minute its per-minute counts are complete from (UTC):
    the store's phasemeter_slo_covered_from_v1 (schema/0026)."""
    out = {}
    for slo_id, _name, _at, covered in client.query(load_sql("slo_registered")).result_rows:
        out[int(slo_id)] = _utc(covered)
    return out


def _utc(when: datetime) -> datetime:
    """A naive time is UTC: clickhouse-connect returns the store's
    DateTime64(3, 'UTC') values naive."""
    return when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when.astimezone(timezone.utc)


def epoch_ms(when: datetime) -> int:
    return round(_utc(when).timestamp() * 1000)




def register(client, sloset: SloSet, at: datetime | None = None) -> tuple[list[str], list[int]]:
    """Make the store count exactly `sloset`'s SLOs. Returns (names written,
    ids no longer counted). A row per name: a new name or target for an id
    already counted keeps the id's registration time, so its coverage stays.
    `at`: when counting starts for a new id (default: now). Only pass an
    earlier time for a store whose rows were all written after it (a fresh
    store filled from history with the SLO already declared, as a test does)."""
    rows = client.query(load_sql("slo_declared")).result_rows
    first: dict[int, datetime] = {}
    for slo_id, _name, _target, when in rows:
        first[int(slo_id)] = min(first.get(int(slo_id), when), when)
    have = {(int(i), n, float(t)) for i, n, t, _ in rows}
    want = {(s.slo_id, s.name, s.target): s for s in sloset.slos}
    new = [s for key, s in want.items() if key not in have]
    if new:
        now = at or datetime.now(timezone.utc)
        client.command(load_sql("slo_register"), parameters={"rows": [
            (s.slo_id, s.name, list(s.models), list(s.buckets), *(s.limit(m) for m in OBJECTIVES),
             int(s.count_failed), s.target, epoch_ms(first.get(s.slo_id, now))) for s in new]})
    stale = sorted(have - set(want))
    if stale:
        client.command(load_sql("slo_retire"), parameters={"rows": stale}, settings={"lightweight_deletes_sync": 2})
    return [s.name for s in new], sorted({i for i, _, _ in stale} - {i for i, _, _ in want})
