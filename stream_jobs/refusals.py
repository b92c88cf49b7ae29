"""What the sink does with a store error, as pure functions (docs/delivery.md, "A store refusal is never a wedge").

A *transient* error (the network; a store locked, down or merging behind) is retried, the worker paused. A
*deterministic* one, met on every retry, is bisected down to the rows it refuses: those are dead-lettered
(`store_refused`), the rest stored. Only errors known to be about the data count: bisecting a store-wide one
(a missing table, a permission) would dead-letter everything.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

TRANSIENT = "transient"
DETERMINISTIC = "deterministic"

# ClickHouse error codes (src/Common/ErrorCodes.cpp) refusing the inserted values: the same on every retry.
DATA_CODES = frozenset({
    6,    # CANNOT_PARSE_TEXT
    27,   # CANNOT_PARSE_INPUT_ASSERTION_FAILED
    41,   # CANNOT_PARSE_DATETIME
    53,   # TYPE_MISMATCH
    69,   # ARGUMENT_OUT_OF_BOUND
    70,   # CANNOT_CONVERT_TYPE
    72,   # CANNOT_PARSE_NUMBER
    117,  # INCORRECT_DATA
    131,  # TOO_LARGE_STRING_SIZE
    321,  # VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE
    349,  # CANNOT_INSERT_NULL_IN_ORDINARY_COLUMN
    395,  # FUNCTION_THROW_IF_VALUE_IS_NON_ZERO (a throwIf in a view over the rows)
    407,  # DECIMAL_OVERFLOW
    469,  # VIOLATED_CONSTRAINT
})
# 252 (TOO_MANY_PARTS) is both: "too many partitions for single INSERT block" is about the rows (fewer days per
# insert pass), "too many parts" is a store whose merges are behind (it passes once they catch up).
TOO_MANY_PARTS = 252
_PARTITIONS_PER_BLOCK = "too many partitions for single insert block"
_CODE = re.compile(r"\bcode:?\s*(\d+)", re.IGNORECASE)
# Errors turning the rows into an Arrow table: a value of a wrong type or out of range fails the same every time.
_PYTHON_DATA_ERRORS = ("ArrowInvalid", "ArrowTypeError", "ArrowNotImplementedError", "OverflowError",
                       "UnicodeEncodeError")


@dataclass(frozen=True)
class StoreErrorKind:
    kind: str          # TRANSIENT or DETERMINISTIC
    code: int | None   # the ClickHouse error code, when the message had one


def classify(exc: BaseException) -> StoreErrorKind:
    """The kind of an insert's error, from its class and its ClickHouse code."""
    if type(exc).__name__ in _PYTHON_DATA_ERRORS:
        return StoreErrorKind(DETERMINISTIC, None)
    text = str(exc)
    match = _CODE.search(text)
    code = int(match.group(1)) if match else None
    if code in DATA_CODES or (code == TOO_MANY_PARTS and _PARTITIONS_PER_BLOCK in text.lower()):
        return StoreErrorKind(DETERMINISTIC, code)
    return StoreErrorKind(TRANSIENT, code)


# ClickHouse's default max_partitions_per_insert_block: a block of more partitions (days) is refused whole.
MAX_PARTITIONS_PER_INSERT = 100


def partition_groups(keys: Sequence[int], limit: int = MAX_PARTITIONS_PER_INSERT) -> list[list[int]]:
    """Row indexes grouped into inserts of at most `limit` distinct partition keys, taken in ascending order; the
    same rows always give the same groups, so a retry or a re-read sends the same inserts with the same tokens."""
    distinct = sorted(set(keys))
    if len(distinct) <= limit:
        return [list(range(len(keys)))]
    group_of = {key: i // limit for i, key in enumerate(distinct)}
    groups: list[list[int]] = [[] for _ in range((len(distinct) + limit - 1) // limit)]
    for i, key in enumerate(keys):
        groups[group_of[key]].append(i)
    return groups


class Refused(Exception):
    """An insert the store refused for good (`classify` said deterministic)."""

    def __init__(self, kind: StoreErrorKind, message: str):
        super().__init__(message)
        self.kind = kind


def isolate(indexes: list[int], insert: Callable[[list[int], str], None], path: str = ""
            ) -> list[tuple[int, Refused]]:
    """Insert `indexes`; on a refusal, bisect down to single rows. -> the rows refused, with why.
    `insert(indexes, path)` raises Refused; `path` ("", "0", "01", ...) names the sub-insert, so each gets a
    token of its own, the same on every run over the same rows. About 2·k·log2(n) inserts for k refused of n."""
    try:
        insert(indexes, path)
        return []
    except Refused as refused:
        if len(indexes) == 1:
            return [(indexes[0], refused)]
    half = len(indexes) // 2
    return isolate(indexes[:half], insert, path + "0") + isolate(indexes[half:], insert, path + "1")
