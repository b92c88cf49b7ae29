"""A batch's generations as columns, from the C decoder's Structs.

The row path's two dicts per generation, gathered back into columns, took ~240 of 530 ms for 22,600
generations, all Python holding the GIL (docs/performance/worker.md). Here formulas.py's checks and metrics
run on whole columns, and a refused event is named as the full path names it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from itertools import compress
from operator import attrgetter, itemgetter

import numpy as np
import pyarrow as pa

from phasemeter.settings import redact

from . import dead_letter, refusals
from .contract import MAX_DURATION_S, MIN_T0, PD_LABELS, STALL_FIELDS, STREAMED, Rejection
from .derive import ROW_COLUMNS, ranged
from .fast_decode import _UNSET, given
from .formulas import Fields, failing, metrics, out_of_range, rejection_of

_TEXT = ("request_id", "model", "status")  # Generation fields stored as they are
_LABELS = ("finish_reason", "gateway", "replica")  # null -> "", as derive.validate gives them
# A row's fields not stored, in the dict view only: of the v2 extras, only stall data has any.
_EXTRAS = tuple(k for k in STALL_FIELDS if k not in ROW_COLUMNS)
_NULL_COLUMNS = STALL_FIELDS + ("stalled",)  # the v2 extras the C decoder leaves to the full path: null on its rows


def ts_array(seconds) -> pa.Array:
    """Epoch seconds -> the stored ts column: the exact millisecond, UTC."""
    ms = np.round(np.asarray(seconds, dtype="float64") * 1000.0).astype("int64")
    return pa.array(ms, type=pa.timestamp("ms", tz="UTC"))


def _by_column(rows: list[dict], columns: tuple[str, ...]) -> list[list]:
    """Each column's values, looped in C by map over an itemgetter: transposing with zip made a tuple
    per row, whose garbage cost ~15 % more on 20,000 rows."""
    return [list(map(itemgetter(c), rows)) for c in columns]


def arrow_of(rows: list[dict], columns: tuple[str, ...]) -> pa.Table:
    """Dicts -> an Arrow table (insert_df, value by value, was the sink's bottleneck); None stays null."""
    arrays = [ts_array(values) if col == "ts" else pa.array(values)
              for col, values in zip(columns, _by_column(rows, columns), strict=True)]
    return pa.Table.from_arrays(arrays, names=list(columns))


def day_numbers(seconds) -> np.ndarray:
    """Epoch seconds -> the UTC day of the stored ts, rounded as `ts_array` does (schema/0001's partition)."""
    ms = np.round(np.asarray(seconds, dtype="float64") * 1000.0).astype("int64")
    return ms // 86_400_000


class Generations(Sequence):
    """The rows of a batch as columns. A Sequence of the full path's dicts
    (built on demand, for tests and small callers); the sink takes `arrow()`."""

    def __init__(self, columns: dict[str, pa.Array], ts: np.ndarray, request_ids: list[str],
                 sources: list[tuple[str, int, int]], per_message: list[int]):
        self.columns = columns
        self.ts = ts  # epoch seconds, t0
        self.request_ids = request_ids
        self.sources = sources  # (topic, partition, offset) of each message, in the batch's order
        self.per_message = per_message  # its rows
        self._rows: list[dict] | None = None

    @classmethod
    def from_rows(cls, rows: list[dict]) -> "Generations":
        """The full path's row dicts as columns, typed as `arrow_of` types them. Consecutive rows of one
        record are one message, so sink.counted_token hashes what batch_token hashed row by row."""
        values = dict(zip(ROW_COLUMNS, _by_column(rows, ROW_COLUMNS)))
        columns = {name: pa.array(v) for name, v in values.items() if name != "ts"}
        columns.update({k: pa.array([r.get(k) for r in rows]) for k in _EXTRAS if rows and k in rows[0]})
        src = [np.array(values[k], dtype=object) for k in ("src_topic", "src_partition", "src_offset")]
        first = np.ones(len(rows), dtype=bool)  # a row whose record is not the row before's
        first[1:] = np.logical_or.reduce([v[1:] != v[:-1] for v in src])
        starts = np.flatnonzero(first)
        return cls(columns, np.array(values["ts"], dtype=np.float64), list(values["request_id"]),
                   list(zip(*(v[starts].tolist() for v in src))), np.diff(starts, append=len(rows)).tolist())

    def __add__(self, other: "Generations") -> "Generations":
        """These rows, then `other`'s; a column one side lacks (null there) or has all null takes the other's type."""
        if not len(other) or not len(self):
            return other if len(other) else self
        # "default" types a lacking or null-typed column as the other side's and refuses any other mismatch, which
        # batch_decode's sum never holds: `_columns` (the Structs) and `from_rows` (the full path) type a column alike,
        # or null where all null.
        both = pa.concat_tables([pa.table(self.columns), pa.table(other.columns)], promote_options="default")
        return Generations({name: both[name].combine_chunks() for name in both.column_names},
                           np.concatenate([self.ts, other.ts]), self.request_ids + other.request_ids,
                           self.sources + other.sources, self.per_message + other.per_message)

    def __len__(self) -> int:
        return len(self.request_ids)

    def __getitem__(self, i):
        if self._rows is None:  # the dicts, built once
            names = list(self.columns)
            self._rows = [dict(zip(names, vs)) for vs in zip(*(self.columns[n].to_pylist() for n in names))]
            for row, t0 in zip(self._rows, self.ts.tolist()):
                row["ts"] = row["t0"] = t0
        return self._rows[i]

    def take(self, indexes: list[int]) -> "Generations":
        """These rows only, in order, a run of one message's rows counted as one message for sink.counted_token
        (row by row: 7.5 ms here and 9.5 ms in the token for 50,000 rows with 1 % dropped, against 0.4 ms)."""
        at = np.asarray(indexes, dtype=np.int64)
        return self._of(at, {k: v.take(at) for k, v in self.columns.items()})

    def without(self, rows: set[int]) -> "Generations":
        """All rows but these, in order: a mask filter, half the time of a take (docs/performance/worker.md)."""
        keep = np.ones(len(self), dtype=bool)
        keep[np.fromiter(rows, dtype=np.int64, count=len(rows))] = False
        mask = pa.array(keep)
        return self._of(np.flatnonzero(keep), {k: v.filter(mask) for k, v in self.columns.items()})

    def _of(self, at: np.ndarray, columns: dict[str, pa.Array]) -> "Generations":
        """The rows at `at` (increasing or not), their columns already picked."""
        message_of_row = np.repeat(np.arange(len(self.per_message)), self.per_message)[at]
        starts = np.flatnonzero(np.diff(message_of_row, prepend=-1))
        return Generations(columns, self.ts[at], list(map(self.request_ids.__getitem__, at.tolist())),
                           [self.sources[m] for m in message_of_row[starts].tolist()],
                           np.diff(starts, append=len(at)).tolist())

    def arrow(self) -> pa.Table:
        """The table the sink inserts: ROW_COLUMNS."""
        arrays = [ts_array(self.ts) if c == "ts" else self.columns[c] for c in ROW_COLUMNS]
        return pa.Table.from_arrays(arrays, names=list(ROW_COLUMNS))

    def counted_offsets(self) -> list[tuple[tuple[str, int, int], int]]:
        """((topic, partition, offset), rows) per message, for sink.counted_token."""
        return list(zip(self.sources, self.per_message))

    def cells(self, rows) -> set:
        """These rows' minute cells, as ledger.Stored gives them; one datetime per distinct minute."""
        model, bucket = self.columns["model"].to_pylist(), self.columns["input_bucket"].to_pylist()
        ts = self.ts.tolist()
        keys = {(model[i], bucket[i], ts[i] // 60 * 60) for i in rows}
        return {(m, b, datetime.fromtimestamp(t, timezone.utc)) for m, b, t in keys}


def columns_of(rows, now: float) -> tuple[Generations, list[tuple[int, dict]]]:
    """Row dicts as columns, and (index, dead letter) of each row Arrow cannot take (past int64...),
    found by the store's bisection (refusals.isolate) and refused as the store refuses a row for good."""
    if isinstance(rows, Generations) or not len(rows):
        return rows, []

    def built(indexes: list[int] | None, path: str = "") -> Generations:
        try:
            return Generations.from_rows(rows if indexes is None else [rows[i] for i in indexes])
        except Exception as exc:
            kind = refusals.classify(exc)
            if kind.kind != refusals.DETERMINISTIC:
                raise
            raise refusals.Refused(kind, f"{type(exc).__name__}: {redact(str(exc))[:300]}") from None
    try:
        return built(None), []
    except refusals.Refused:
        refused = refusals.isolate(list(range(len(rows))), built)
    gone = {i for i, _ in refused}
    return (built([i for i in range(len(rows)) if i not in gone]),
            [(i, dead_letter.refused_row(rows[i], why.kind.code, str(why), now)) for i, why in refused])


def _derive(gens: list, counts: list[int], events, bucket, now: float,
            oldest: float = MIN_T0) -> tuple[Generations, list[tuple[int, Rejection]]]:
    """The rows of these Structs that pass formulas.out_of_range and CHECKS, as columns, and
    (index in `gens`, Rejection) of the others, named as the full path names them."""
    n = len(gens)

    # map over an attrgetter loops in C: ~25 % less time than getattr in a comprehension (docs/performance/worker.md).
    def numbers(name, dtype):
        return np.fromiter(map(attrgetter(name), gens), dtype=dtype, count=n)

    nullable = {name: _floats(list(map(attrgetter(name), gens))) for name in ("ttft_s", "queue_s")}
    nullable["kv_transfer_s"] = _floats(_v2_only_column(gens, "kv_transfer_s"))
    nullable["cached_input_tokens"] = pa.array(list(map(attrgetter("cached_input_tokens"), gens)), type=pa.int64())
    nullable[STREAMED] = pa.array(_v2_only_column(gens, STREAMED), type=pa.bool_()).cast(pa.int64())  # 1, 0 or null
    f = Fields(numbers("t0", np.float64), numbers("e2e_s", np.float64),
               *(nullable[k].to_numpy(zero_copy_only=False) for k in ("ttft_s", "queue_s")),
               numbers("input_tokens", np.int64), numbers("output_tokens", np.int64),
               # Unsafe: a count past 2**53 has no exact float, and is out of range either way.
               nullable["cached_input_tokens"].cast(pa.float64(), safe=False).to_numpy(zero_copy_only=False),
               nullable["kv_transfer_s"].to_numpy(zero_copy_only=False),
               nullable[STREAMED].cast(pa.float64()).to_numpy(zero_copy_only=False))
    with np.errstate(invalid="ignore"):
        # Ranges first, as the full path checks them (`check` -1 below).
        failing_rows = [out_of_range(f), *failing(f, now + MAX_DURATION_S, oldest)]
    bad_rows: list[tuple[int, Rejection]] = []
    if any(m.any() for m in failing_rows):
        refusing = np.vstack(failing_rows)  # a row per check, a column per row of the batch
        good = ~refusing.any(axis=0)
        first = refusing.argmax(axis=0) - 1  # the first check refusing each row; -1: out of range
        for i in np.flatnonzero(~good).tolist():
            check = int(first[i])
            bad_rows.append((i, _named(gens[i]) if check < 0 else rejection_of(check, Fields(*(v[i].item() for v in f)),
                                                                                oldest)))
        gens = list(compress(gens, good.tolist()))
        message_of = np.repeat(np.arange(len(counts)), counts)
        counts = np.bincount(message_of[good], minlength=len(counts)).tolist()
        f = Fields(*(v[good] for v in f))
        nullable = {k: v.filter(pa.array(good)) for k, v in nullable.items()}
    return _columns(gens, f, nullable, counts, events, bucket), bad_rows


def _floats(values: list) -> pa.Array:
    """A nullable duration's column. The Struct keeps its JSON type, and Arrow refuses an int no float holds exactly
    (past 2**53): such a row is out of range anyway, refused and named from its Struct."""
    try:
        return pa.array(values, type=pa.float64())
    except pa.ArrowInvalid:
        return pa.array([None if v is None else float(v) for v in values], type=pa.float64())


def _named(e) -> Rejection:
    """The full path's Rejection of a Generation out of range (derive.ranged on its Struct)."""
    return ranged(lambda name: given(getattr(e, name)), {})


def _v2_only_column(gens: list, name: str) -> list:
    """A V2_ONLY field of each Struct, None where absent or null. Most batches carry none, found by one count in C."""
    values = list(map(attrgetter(name), gens))
    if values.count(_UNSET) == len(values):
        return [None] * len(values)
    return list(map(given, values))


def _columns(gens: list, f: Fields, nullable: dict, counts: list[int], events, bucket) -> Generations:
    n = len(gens)

    def col(name):
        return list(map(attrgetter(name), gens))

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        derived = metrics(f, np)
    # Repeated strings taken by index from a short array, in C.
    labels = pa.array(bucket.labels, type=pa.string()).take(np.searchsorted(bucket.edges, f.n_in, side="right") - 1)

    columns: dict[str, pa.Array] = {name: pa.array(col(name), type=pa.string()) for name in _TEXT}
    columns.update({name: pa.array(col(name), type=pa.string()).fill_null("") for name in _LABELS})
    columns.update({name: pa.array(_v2_only_column(gens, name), type=pa.string()).fill_null("") for name in PD_LABELS})
    columns.update(nullable)
    columns.update({name: pa.array(v, mask=np.isnan(v)) for name, v in derived.items()})
    columns.update({
        "input_bucket": labels,
        "input_tokens": pa.array(f.n_in), "output_tokens": pa.array(f.n_out),
        "e2e_s": pa.array(f.e2e),
        "output_tokens_estimated": pa.array(np.zeros(n, dtype=np.int64)),
        "schema_version": pa.array(np.fromiter(map(attrgetter("schema_version"), gens), dtype=np.int64, count=n)),
    })
    columns.update({name: pa.nulls(n) for name in _NULL_COLUMNS})
    sources = [(e.message.topic, e.message.partition, e.message.offset) for e in events]
    topics, partitions, offsets = zip(*sources) if sources else ((), (), ())
    message_of_row = np.repeat(np.arange(len(events)), counts)
    columns["src_topic"] = pa.array(topics, type=pa.string()).take(message_of_row)
    columns["src_partition"] = pa.array(np.array(partitions, dtype=np.int64)[message_of_row])
    columns["src_offset"] = pa.array(np.array(offsets, dtype=np.int64)[message_of_row])
    return Generations(columns, f.t0, columns["request_id"].to_pylist(), sources, counts)


def ts_bounds(rows: Generations) -> tuple[float, float] | None:
    """(oldest, newest) ts of a batch's rows."""
    if not len(rows):
        return None
    return float(rows.ts.min()), float(rows.ts.max())
