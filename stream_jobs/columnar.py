"""A batch of well-formed generations decoded straight into columns.

With envelopes, nearly every batch of the raw topic is generations and
nothing else, all well-formed, none stored before. For such a batch the
worker's row path built two dicts per generation (the checked fields, then
the derived row), gathered the rows' values back into columns for Arrow, and
looped over the rows to stamp their source: in the profile of a batch of
22,600 generations, about 240 of its 530 ms, all of it Python holding the GIL
(docs/performance/worker.md). Here the C decoder's Structs go to columns once, and the
derivation runs on whole columns.

This is an accelerator, not a second definition. The metrics are
`derive.derive`'s and the checks across fields `derive.ordered_fields`'s: a
test holds this module to the row path, value for value, on generated
batches. Anything else sends the whole batch to the row path, unchanged:
a message that is not all well-formed generations (`from_events` returns
None), a re-read, a duplicate (stream_jobs/pipeline.py decides those).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from operator import attrgetter

import numpy as np
import pyarrow as pa

from .contract import MAX_DURATION_S, MIN_T0
from .derive import ROW_COLUMNS, NO_EXTRAS
from .fast_decode import Generation, decoded_events

# Fields of the C decoder's Generation, and the row's columns they fill as they are.
_TEXT = ("request_id", "model", "status")
_LABELS = ("finish_reason", "gateway", "replica")  # null -> "" (ordered_fields)
_GENERATIONS_ONLY = {Generation}
_NULL_COLUMNS = tuple(k for k, v in NO_EXTRAS.items() if v is None) + ("stalled",)
_EMPTY_LABELS = tuple(k for k, v in NO_EXTRAS.items() if v == "")  # no P/D split: "" as every absent label


def ts_array(seconds) -> pa.Array:
    """Epoch seconds -> the stored ts column: the exact millisecond, UTC."""
    ms = np.round(np.asarray(seconds, dtype="float64") * 1000.0).astype("int64")
    return pa.array(ms, type=pa.timestamp("ms", tz="UTC"))


def day_numbers(seconds) -> np.ndarray:
    """Epoch seconds -> the UTC day of the stored ts (its exact millisecond,
    as `ts_array` rounds it): the partition of generations (schema/0001)."""
    ms = np.round(np.asarray(seconds, dtype="float64") * 1000.0).astype("int64")
    return ms // 86_400_000


def _rate(count: np.ndarray, seconds: np.ndarray, known: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """derive._rate on columns: (values, null mask). Null without a time,
    with a time <= 0, or where the rate overflows."""
    ok = known & (seconds > 0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        value = np.where(ok, count / np.where(ok, seconds, 1.0), np.nan)
    ok &= np.isfinite(value)
    return value, ~ok


class Generations(Sequence):
    """The rows of a batch as columns. A Sequence of the row path's dicts
    (built on demand, for tests and small callers); the sink takes `arrow()`."""

    def __init__(self, columns: dict[str, pa.Array], ts: np.ndarray, request_ids: list[str],
                 sources: list[tuple[str, int, int]], per_message: list[int]):
        self.columns = columns
        self.ts = ts  # epoch seconds, t0
        self.request_ids = request_ids
        self.sources = sources  # (topic, partition, offset) of each message, in the batch's order
        self.per_message = per_message  # its rows
        self._rows: list[dict] | None = None

    def __len__(self) -> int:
        return len(self.request_ids)

    def __getitem__(self, i):
        if self._rows is None:
            self._rows = self.columns_to_rows()
        return self._rows[i]

    def take(self, indexes: list[int]) -> "Generations":
        """These rows only, in this order; each row counted as its own
        message for the token (sink.counted_token hashes the same bytes)."""
        at = np.asarray(indexes, dtype=np.int64)
        message_of_row = np.repeat(np.arange(len(self.per_message)), self.per_message)[at]
        return Generations({k: v.take(at) for k, v in self.columns.items()}, self.ts[at],
                           [self.request_ids[i] for i in indexes], [self.sources[m] for m in message_of_row],
                           [1] * len(indexes))

    def columns_to_rows(self) -> list[dict]:
        names = list(self.columns)
        values = [self.columns[n].to_pylist() for n in names]
        rows = [dict(zip(names, vs)) for vs in zip(*values)]
        for row, t0 in zip(rows, self.ts.tolist()):
            row["ts"] = row["t0"] = t0
        return rows

    def arrow(self) -> pa.Table:
        """The table the sink inserts: ROW_COLUMNS, as sink._arrow builds them."""
        arrays = [ts_array(self.ts) if c == "ts" else self.columns[c] for c in ROW_COLUMNS]
        return pa.Table.from_arrays(arrays, names=list(ROW_COLUMNS))

    def counted_offsets(self) -> list[tuple[tuple[str, int, int], int]]:
        """((topic, partition, offset), rows) per message, for the sink's
        batch token (sink.counted_token)."""
        return list(zip(self.sources, self.per_message))

    def cells(self, rows) -> set:
        """The minute cells of the rows at these indexes (pipeline._cell);
        each distinct minute turned into a datetime once."""
        model, bucket = self.columns["model"].to_pylist(), self.columns["input_bucket"].to_pylist()
        ts = self.ts.tolist()
        keys = {(model[i], bucket[i], ts[i] // 60 * 60) for i in rows}
        return {(m, b, datetime.fromtimestamp(t, timezone.utc)) for m, b, t in keys}


def from_events(events, bucket, max_bytes: int, now: float, max_batch: int = 10_000,
                oldest: float = MIN_T0) -> Generations | None:
    """The batch's rows as columns when every message is a well-formed
    generation or an envelope of them (what the row path would give, with
    no rejection and no phase); else None."""
    gens: list = []
    counts: list[int] = []
    for event in events:
        raw = event.value
        if raw is None or len(raw) > max_bytes:
            return None
        inner = decoded_events(raw, max_batch)  # None: malformed, a bad field...: the row path names it
        if inner is None or set(map(type, inner)) != _GENERATIONS_ONLY:
            return None
        gens += inner
        counts.append(len(inner))
    if not gens:
        return None
    return _derive(gens, counts, events, bucket, now, oldest)


class Ahead:
    """`from_events` of a batch decoded before its turn: the ingest agent
    decodes the next batch while the store writes this one (the insert runs
    without the GIL), which took ~10-20 % off a batch of envelopes
    (docs/performance/worker.md). Only the pure decode runs early; every decision
    that reads the store or the worker's positions is made in its turn.

    Its rows are the batch's only if admission left the batch as it was
    (the same events, in order). An earlier clock is stricter about a t0
    too far ahead of it (such a batch took the row path), and the retention
    bound moves with the clock, so `rows_for` checks it again at the batch's
    turn: the rows are those `from_events` would give then."""

    def __init__(self, events, bucket, max_bytes: int, now: float, oldest: float = MIN_T0):
        self.events = list(events)
        self.gens = from_events(self.events, bucket, max_bytes, now, oldest=oldest)

    def rows_for(self, events, oldest: float = MIN_T0) -> Generations | None:
        if self.gens is None or len(events) != len(self.events) or self.gens.ts.min() < oldest:
            return None
        return self.gens if all(a is b for a, b in zip(events, self.events)) else None


def _derive(gens: list, counts: list[int], events, bucket, now: float, oldest: float = MIN_T0) -> Generations | None:
    n = len(gens)

    # One field of every Struct: map over an attrgetter runs the loop in C,
    # about 25 % less than a comprehension calling getattr (docs/performance/worker.md).
    def col(name):
        return list(map(attrgetter(name), gens))

    def numbers(name, dtype):
        return np.fromiter(map(attrgetter(name), gens), dtype=dtype, count=n)

    t0 = numbers("t0", np.float64)
    e2e = numbers("e2e_s", np.float64)
    n_in = numbers("input_tokens", np.int64)
    n_out = numbers("output_tokens", np.int64)
    nullable = {name: pa.array(col(name), type=pa.float64()) for name in ("ttft_s", "queue_s")}
    nullable["cached_input_tokens"] = pa.array(col("cached_input_tokens"), type=pa.int64())
    ttft_known = ~np.asarray(nullable["ttft_s"].is_null())
    queue_known = ~np.asarray(nullable["queue_s"].is_null())
    cached_known = ~np.asarray(nullable["cached_input_tokens"].is_null())
    ttft = nullable["ttft_s"].to_numpy(zero_copy_only=False)
    queue = nullable["queue_s"].to_numpy(zero_copy_only=False)
    cached = nullable["cached_input_tokens"].fill_null(0).to_numpy()

    # The checks of fast_decode._generation and derive.ordered_fields: a
    # batch with any event they send to the full path takes the row path.
    until = np.where(ttft_known, ttft, e2e)
    bad = ((t0 > now + MAX_DURATION_S) | (t0 < oldest) | (ttft_known & (e2e < ttft)) | (queue_known & (queue > until))
           | (~ttft_known & (n_out > 0)) | (cached_known & (cached > n_in)))
    if bad.any():
        return None

    # derive.derive, column by column.
    decode_s = e2e - np.where(ttft_known, ttft, 0.0)
    prefill, prefill_null = _rate(n_in, ttft, ttft_known)
    uncached, uncached_null = _rate(n_in - cached, ttft - np.where(queue_known, queue, 0.0),
                                    cached_known & ttft_known)
    decode, decode_null = _rate(n_out - 1, decode_s, ttft_known & (n_out > 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(decode_null, np.nan, decode_s / np.where(decode_null, 1, n_out - 1))
    # Repeated strings are taken from a short array by index, in C.
    labels = pa.array(bucket.labels, type=pa.string()).take(np.searchsorted(bucket.edges, n_in, side="right") - 1)

    columns: dict[str, pa.Array] = {name: pa.array(col(name), type=pa.string()) for name in _TEXT}
    # A label is a non-empty string or null, and null is stored as "".
    columns.update({name: pa.array(col(name), type=pa.string()).fill_null("") for name in _LABELS})
    columns.update(nullable)
    columns.update({
        "input_bucket": labels,
        "input_tokens": pa.array(n_in), "output_tokens": pa.array(n_out),
        "e2e_s": pa.array(e2e),
        "decode_s": pa.array(decode_s, mask=~ttft_known),
        "prefill_tps": pa.array(prefill, mask=prefill_null),
        "prefill_tps_uncached": pa.array(uncached, mask=uncached_null),
        "decode_tps": pa.array(decode, mask=decode_null),
        "tpot_s": pa.array(tpot, mask=decode_null),
        "output_tokens_estimated": pa.array(np.zeros(n, dtype=np.int64)),
        "schema_version": pa.array(numbers("schema_version", np.int64)),
    })
    columns.update({name: pa.nulls(n) for name in _NULL_COLUMNS})
    columns.update({name: pa.array([""], type=pa.string()).take(np.zeros(n, dtype=np.int64)) for name in _EMPTY_LABELS})
    sources = [(e.message.topic, e.message.partition, e.message.offset) for e in events]
    topics, partitions, offsets = zip(*sources)
    sizes = np.array(counts)
    message_of_row = np.repeat(np.arange(len(events)), sizes)
    columns["src_topic"] = pa.array(topics, type=pa.string()).take(message_of_row)
    columns["src_partition"] = pa.array(np.array(partitions, dtype=np.int64)[message_of_row])
    columns["src_offset"] = pa.array(np.array(offsets, dtype=np.int64)[message_of_row])
    return Generations(columns, t0, columns["request_id"].to_pylist(), sources, counts)


def ts_bounds(rows) -> tuple[float, float] | None:
    """(oldest, newest) ts of a batch's rows, dicts or columns."""
    if not len(rows):
        return None
    if isinstance(rows, Generations):
        return float(rows.ts.min()), float(rows.ts.max())
    ts = [r["ts"] for r in rows]
    return min(ts), max(ts)
