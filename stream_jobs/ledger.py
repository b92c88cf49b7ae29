"""The worker's exactly-once bookkeeping in the store, through the store client directly (tuples, no DataFrames:
it runs every batch). SQL lives in sql/*.sql with every value bound server-side.

* `positions` / `record`: the progress ledger (schema/0005), where each partition resumes; written after a batch
  is durable, read on assignment.
* `stored_max` / `stored_in_range`: what a re-read batch already stored, so each row and dead letter is written once.
* `existing_request_ids`: duplicate deliveries from a gateway, one `Ask` per scope of a batch.
* `all_tier_mismatches`, `slo_mismatches` / `repair_slo`: cells where a rollup tier or the declared SLOs' counts
  missed (or doubled) a crashed insert's block; the worker rebuilds them from raw.
"""

from __future__ import annotations

import math
import os
import socket
import zlib
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from phasemeter.store import rollup, slo_defs
from phasemeter.store.client import load_sql
from phasemeter.store.slices import MAX_BOUND_CHARS, cell_chars, slices

from . import reasons as R
from .sequence import TP

Cell = tuple[str, str, datetime]  # model, input_bucket, minute (UTC)
WORKER_ID = f"{socket.gethostname()}:{os.getpid()}"
SLO_VIEW = "slo_minute_mv"


def _rows(client, name: str, params: dict) -> list[tuple]:
    return client.query(load_sql(name), parameters=params).result_rows


def label_values(client) -> list[tuple[str, str, str]]:
    """(label, model, value) of the bounded labels the store holds (labels.py)."""
    return [(str(a), str(m), str(v)) for a, m, v in _rows(client, "label_values", {"other": "other"})]


def positions(client, topics: list[str]) -> dict[TP, int]:
    return {(t, int(p)): int(o) for t, p, o in _rows(client, "progress_positions", {"topics": list(topics)})}


def record(client, progress: dict[TP, int]) -> None:
    if progress:
        client.command(load_sql("record_progress"),
                       parameters={"rows": [(t, p, o) for (t, p), o in sorted(progress.items())], "worker": WORKER_ID})


def stored_max(client, topic: str) -> dict[int, int]:
    return {int(p): int(o) for p, o in _rows(client, "stored_offsets", {"topic": topic})}


@dataclass
class Stored:
    rows: dict[tuple[int, str], Cell] = field(default_factory=dict)  # (offset, request_id) -> cell
    dead: set[int] = field(default_factory=set)                      # offsets with dead letters
    duplicates: Counter = field(default_factory=Counter)               # (offset, detail) -> duplicate dead letters


def offset_spans(sources) -> dict[TP, tuple[int, int]]:
    """(topic, partition, offset) triples -> per partition, the span [lo, hi] to ask `stored_in_range` about."""
    spans: dict[TP, tuple[int, int]] = {}
    for topic, partition, offset in sources:
        lo, hi = spans.get((topic, partition), (offset, offset))
        spans[topic, partition] = (min(lo, offset), max(hi, offset))
    return spans


def stored_in_range(client, topic: str, partition: int, lo: int, hi: int) -> Stored:
    into = Stored()
    for kind, offset, rid, model, bucket, minute in _rows(
            client, "stored_in_range", {"topic": topic, "partition": partition, "lo": lo, "hi": hi,
                                        "duplicate": R.DUPLICATE}):
        if kind == "row":
            into.rows[int(offset), rid] = (model, bucket, rollup.utc(minute))
        elif kind == "dead":
            into.dead.add(int(offset))
        else:
            into.duplicates[int(offset), rid] += 1
    return into


# CRC32s per statement on a server, to keep one bound value under its size limit; the embedded store has no
# such limit and takes them all at once (`slice_size=None`): docs/performance/sink.md.
CRC_SLICE = 10_000
# The duplicate check reads a range's stored ids itself when they are at most 1/NEAR_SHARE of the batch's ids
# (reading one costs about what sending and matching one does: docs/performance/sink.md).
NEAR_SHARE = 4


class _UInts:
    """Unsigned integers bound as one Array value, joined in C where the client would format a list element by
    element in Python (docs/performance/sink.md). The client binds an unknown type by str(); digits need no escaping."""

    __slots__ = ("text",)

    def __init__(self, numbers: list[int]):
        self.text = "[" + ",".join(map(str, numbers)) + "]"

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Ask:
    """One scope of a batch's duplicate check: which of `ids` are stored from one of `topics` with ts in [lo, hi]
    (epoch s; to the millisecond, as the store keeps ts, widened to whole milliseconds)."""

    topics: tuple[str, ...]
    ids: list[str]
    lo: float
    hi: float

    def bounds(self) -> dict:
        return {"topics": list(self.topics), "lo_ms": math.floor(self.lo * 1000), "hi_ms": math.ceil(self.hi * 1000)}


def existing_request_ids(client, asks: list[Ask], slice_size: int | None = CRC_SLICE,
                         near_share: int | None = NEAR_SHARE) -> list[set[str]]:
    """Each ask's stored ids; `near_share` None: CRC32s only.

    One read of the stored rows covers every ask of a batch (their topics, from the least lo to the greatest hi),
    matched here, each ask to its own topics and range, when it holds at most 1/near_share as many rows as the asks
    have ids. A batch of raw and joined records asks twice over nearly one range, the joined scope on both topics:
    asked one by one, the joined scope's read held over a quarter of its own ids in half the batches, and the check
    sent their CRC32s (~0.2 s a batch, docs/performance/worker.md). Past the limit each ask is asked alone, as one
    ask can still read its own range when the whole cannot."""
    wanted = [set(a.ids) for a in asks]
    near_limit = sum(map(len, wanted)) // near_share if near_share else 0
    if near_limit:
        whole = Ask(tuple(sorted({t for a in asks for t in a.topics})), [], min(a.lo for a in asks),
                    max(a.hi for a in asks))
        near = _rows(client, "request_ids_in_range", {**whole.bounds(), "limit": near_limit + 1})
        if len(near) <= near_limit:
            return [_matched(near, a, whole) & w for a, w in zip(asks, wanted)]
        if len(asks) > 1:
            return [existing_request_ids(client, [a], slice_size, near_share)[0] for a in asks]
    return [_by_crc(client, a, w, slice_size) for a, w in zip(asks, wanted)]


def _matched(near: list[tuple], ask: Ask, whole: Ask) -> set[str]:
    """The request_ids of `near`, the rows read for `whole`, that are on `ask`'s topics and in its range: all of them
    when the ask is the whole read (a batch of one scope), without a check per row (~1.6 ms of 10,000 rows)."""
    if tuple(sorted(ask.topics)) == whole.topics and (ask.lo, ask.hi) == (whole.lo, whole.hi):
        return {rid for _, rid, _ in near}
    b = ask.bounds()
    return {rid for topic, rid, ms in near if topic in ask.topics and b["lo_ms"] <= ms <= b["hi_ms"]}


def _by_crc(client, ask: Ask, wanted: set[str], slice_size: int | None) -> set[str]:
    """The stored ids of `wanted`, asked about as their CRC32s, `slice_size` to a statement."""
    crcs = sorted({zlib.crc32(i.encode("utf-8")) for i in wanted})
    slice_size = slice_size or max(1, len(crcs))
    found = {r[0] for k in range(0, len(crcs), slice_size)
             for r in _rows(client, "existing_request_ids", {**ask.bounds(), "crcs": _UInts(crcs[k:k + slice_size])})}
    return found & wanted  # a stored id whose CRC matched one of ours is not ours


def all_tier_mismatches(client, start: datetime, end: datetime) -> list[tuple]:
    """[(tier, model, bucket, cell start, raw_n, rollup_n)] over every tier, which the chaos and soak checks hold to
    empty. Coarse cells reaching outside [start, end] hold raw rows outside it and are skipped: pass whole days."""
    return [(t.name, *bad) for t in rollup.TIERS for bad in rollup.mismatches(client, start, end, tier=t)]


def slo_mismatches(client, start: datetime, end: datetime, cells: set[Cell] = frozenset()) -> list[tuple]:
    """[(slo_id, model, bucket, minute, raw_n, counted_n)] where the SLO counts != raw."""
    params = {"start": rollup.naive(start), "end": rollup.naive(end),
              "cells": [(m, b, rollup.naive(t)) for m, b, t in sorted(cells)]}
    sql = rollup.wrapped(client, "slo_mismatches", SLO_VIEW)
    return [(int(i), m, b, rollup.utc(t), int(r), int(n))
            for i, m, b, t, r, n in client.query(sql, parameters=params).result_rows]


def repair_slo(client, cells: set[Cell], attempts: int = 3, limit: int = MAX_BOUND_CHARS) -> list[tuple]:
    """As a rollup tier's repair, for slo_minute: delete the unequal cells' counts and rebuild them from raw with
    the view's own SELECT, a slice of cells at a time (store/slices.py). With no SLO declared (the default) the
    view counts nothing and sql/slo_mismatches.sql judges declared SLOs only, so a look at slo_definitions spares
    the check (docs/performance/sink.md)."""
    if not cells or not slo_defs.registered(client):
        return []
    return [bad for part in slices(sorted(cells), cell_chars, limit)
            for bad in _repair_slo(client, set(part), attempts, limit)]


def _repair_slo(client, cells: set[Cell], attempts: int, limit: int) -> list[tuple]:
    start = min(t for _, _, t in cells)
    end = max(t for _, _, t in cells) + timedelta(minutes=1)

    def fix(bad):
        # One row per declared SLO and cell: more than the cells themselves.
        for held in slices([(i, m, b, rollup.naive(t)) for i, m, b, t, _, _ in bad], cell_chars, limit):
            client.command(load_sql("slo_delete_cells"), parameters={"cells": held},
                           settings={"lightweight_deletes_sync": 2})
        rebuild = sorted({(m, b, rollup.naive(t)) for _, m, b, t, _, _ in bad})
        client.command(rollup.wrapped(client, "slo_backfill", SLO_VIEW),
                       parameters={"start": min(t for _, _, t in rebuild),
                                   "end": max(t for _, _, t in rebuild) + timedelta(minutes=1), "cells": rebuild},
                       settings={"insert_deduplicate": 0})  # as the tiers' rebuild: no block dedup

    return rollup.converge(lambda: slo_mismatches(client, start, end, cells), fix, attempts, "slo_minute")
