"""The worker's exactly-once bookkeeping in the store, read and written with
the store client directly (tuples, no DataFrames: it runs every batch).

* `positions` / `record`: the progress ledger (schema/0005): where each
  partition resumes. Written after a batch is durable, read on assignment.
* `stored_max` / `stored_in_range`: what a re-read batch already left in
  the store, so each row and dead letter is written once.
* `existing_request_ids`: duplicate deliveries from a gateway.
* `rollup_mismatches` / `repair_rollup`: cells where the rollup view missed
  (or doubled) a crashed insert's block, rebuilt from raw; the same for the
  declared SLOs' per-minute counts (`slo_mismatches` / `repair_slo`).

SQL lives in sql/*.sql with every value bound server-side.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from phasemeter.store import rollup
from phasemeter.store.client import load_sql

from .sequence import TP

Cell = tuple[str, str, datetime]  # model, input_bucket, minute (UTC)
WORKER_ID = f"{socket.gethostname()}:{os.getpid()}"
SLO_VIEW = "slo_minute_mv"


def _rows(client, name: str, params: dict) -> list[tuple]:
    return client.query(load_sql(name), parameters=params).result_rows


def positions(client, topics: list[str]) -> dict[TP, int]:
    return {(t, int(p)): int(o) for t, p, o in _rows(client, "progress_positions", {"topics": list(topics)})}


def record(client, progress: dict[TP, int]) -> None:
    if progress:
        client.insert("consumer_progress", [[t, p, o, WORKER_ID] for (t, p), o in sorted(progress.items())],
                      column_names=["src_topic", "src_partition", "next_offset", "worker"])


def stored_max(client, topic: str) -> dict[int, int]:
    return {int(p): int(o) for p, o in _rows(client, "stored_offsets", {"topic": topic})}


@dataclass
class Stored:
    rows: dict[tuple[int, str], Cell] = field(default_factory=dict)  # (offset, request_id) -> cell
    dead: set[int] = field(default_factory=set)                      # offsets with dead letters


def stored_in_range(client, topic: str, partition: int, lo: int, hi: int) -> Stored:
    into = Stored()
    for kind, offset, rid, model, bucket, minute in _rows(
            client, "stored_in_range", {"topic": topic, "partition": partition, "lo": lo, "hi": hi}):
        if kind == "row":
            into.rows[int(offset), rid] = (model, bucket, _utc(minute))
        else:
            into.dead.add(int(offset))
    return into


def existing_request_ids(client, topic: str, ids: list[str], lo: float, hi: float) -> set[str]:
    """Which of `ids` are already stored with ts in [lo, hi] (epoch seconds)."""
    params = {"topic": topic, "ids": ids, "lo": datetime.fromtimestamp(lo, timezone.utc),
              "hi": datetime.fromtimestamp(hi, timezone.utc)}
    return {r[0] for r in _rows(client, "existing_request_ids", params)}


def _utc(t: datetime) -> datetime:
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)


def rollup_mismatches(client, start: datetime, end: datetime, cells: set[Cell] = frozenset()) -> list[tuple]:
    """[(model, bucket, minute, raw_n, rollup_n)] where the rollup != raw."""
    params = {"start": start, "end": end, "cells": [(m, b, _naive(t)) for m, b, t in sorted(cells)]}
    return [(m, b, _utc(t), int(r), int(n)) for m, b, t, r, n in _rows(client, "rollup_mismatches", params)]


def _naive(t: datetime) -> datetime:
    return _utc(t).replace(tzinfo=None)


def repair_rollup(client, cells: set[Cell], attempts: int = 3) -> list[tuple]:
    """Make the rollup equal raw on `cells`; returns the mismatches found
    (empty when the crashed insert's view block had landed after all).

    Delete the unequal cells' states, then rebuild them from raw with the
    backfill query, which fills only cells the rollup lacks. A crash between
    the two leaves the cell short, and the re-read batch finds it again:
    the repair converges. Checked again after each pass, because another
    worker sharing a server store may insert into the same cell meanwhile.
    """
    if not cells:
        return []
    start = min(t for _, _, t in cells)
    end = max(t for _, _, t in cells) + timedelta(minutes=1)
    found: list[tuple] = []
    for _ in range(attempts):
        bad = rollup_mismatches(client, start, end, cells)
        if not bad:
            return found
        found += bad
        targets = [(m, b, _naive(t)) for m, b, t, _, _ in bad]
        client.command(load_sql("rollup_delete_cells"), parameters={"cells": targets},
                       settings={"lightweight_deletes_sync": 2})
        lo, hi = min(t for _, _, t in targets), max(t for _, _, t in targets) + timedelta(minutes=1)
        # No block dedup here: an identical rebuild of this cell may already be
        # in the dedup window from an earlier repair whose states were deleted.
        rollup.backfill(client, lo, hi, settings={"insert_deduplicate": 0})
    raise RuntimeError(f"rollup still unequal to raw after {attempts} repairs: {bad[:5]}")


def slo_mismatches(client, start: datetime, end: datetime, cells: set[Cell] = frozenset()) -> list[tuple]:
    """[(slo_id, model, bucket, minute, raw_n, counted_n)] where the SLO counts != raw."""
    params = {"start": start, "end": end, "cells": [(m, b, _naive(t)) for m, b, t in sorted(cells)]}
    sql = rollup.wrapped(client, "slo_mismatches", SLO_VIEW)
    return [(int(i), m, b, _utc(t), int(r), int(n))
            for i, m, b, t, r, n in client.query(sql, parameters=params).result_rows]


def repair_slo(client, cells: set[Cell], attempts: int = 3) -> list[tuple]:
    """As repair_rollup, for slo_minute: delete the unequal cells' counts and
    rebuild them from raw with the view's own SELECT."""
    if not cells:
        return []
    start = min(t for _, _, t in cells)
    end = max(t for _, _, t in cells) + timedelta(minutes=1)
    found: list[tuple] = []
    for _ in range(attempts):
        bad = slo_mismatches(client, start, end, cells)
        if not bad:
            return found
        found += bad
        client.command(load_sql("slo_delete_cells"), parameters={"cells": [(i, m, b, _naive(t)) for i, m, b, t, _, _ in bad]},
                       settings={"lightweight_deletes_sync": 2})
        rebuild = [(m, b, _naive(t)) for _, m, b, t, _, _ in bad]
        lo = min(t for _, _, t in rebuild)
        client.command(rollup.wrapped(client, "slo_backfill", SLO_VIEW),
                       parameters={"start": lo, "end": max(t for _, _, t in rebuild) + timedelta(minutes=1),
                                   "cells": rebuild},
                       settings={"insert_deduplicate": 0})
    raise RuntimeError(f"SLO counts still unequal to raw after {attempts} repairs: {bad[:5]}")
