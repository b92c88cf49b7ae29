"""Store errors: which are retried, which are isolated by bisection, and how
a batch is grouped under the store's partitions-per-insert limit. Pure."""

from __future__ import annotations

import pyarrow as pa
import pytest

from phasemeter.stream_jobs import refusals
from phasemeter.stream_jobs.refusals import DETERMINISTIC, TRANSIENT, Refused, StoreErrorKind, classify, isolate

PARTITIONS = ("Code: 252. DB::Exception: Too many partitions for single INSERT block (more than 100). "
              "The limit is controlled by 'max_partitions_per_insert_block' setting. (TOO_MANY_PARTS)")


class DatabaseError(Exception):
    pass


@pytest.mark.parametrize("exc, kind, code", [
    (DatabaseError(PARTITIONS), DETERMINISTIC, 252),
    # The same code for a store whose merges are behind: it passes later.
    (DatabaseError("Code: 252. DB::Exception: Too many parts (300) in all partitions in total. "
                   "Merges are processing significantly slower than inserts. (TOO_MANY_PARTS)"), TRANSIENT, 252),
    (DatabaseError("Received ClickHouse exception, code: 53, server response: Code: 53. DB::Exception: "
                   "Type mismatch (TYPE_MISMATCH)"), DETERMINISTIC, 53),
    (DatabaseError("Code: 349. DB::Exception: Cannot convert NULL value to non-Nullable type"), DETERMINISTIC, 349),
    (DatabaseError("Code: 241. DB::Exception: Memory limit (total) exceeded (MEMORY_LIMIT_EXCEEDED)"), TRANSIENT, 241),
    # About the store, not the rows: every row would be refused alike.
    (DatabaseError("Code: 60. DB::Exception: Table db.generations does not exist. (UNKNOWN_TABLE)"), TRANSIENT, 60),
    (DatabaseError("Code: 497. DB::Exception: u: Not enough privileges. (ACCESS_DENIED)"), TRANSIENT, 497),
    (ConnectionError("Connection refused"), TRANSIENT, None),
    (RuntimeError("cannot open store chdb:///x: the path is locked by another process"), TRANSIENT, None),
    (pa.ArrowInvalid("Could not convert 'x' with type str: tried to convert to int64"), DETERMINISTIC, None),
    (OverflowError("int too big to convert"), DETERMINISTIC, None),
])
def test_classify(exc, kind, code):
    assert classify(exc) == StoreErrorKind(kind, code)


def test_partition_groups_keep_each_insert_within_the_limit_and_are_deterministic():
    keys = [d % 7 for d in range(30)] + [100 + d for d in range(300)]
    groups = refusals.partition_groups(keys, limit=100)
    assert len(groups) == 4  # 307 distinct days
    assert sorted(i for g in groups for i in g) == list(range(len(keys)))
    assert [len({keys[i] for i in g}) for g in groups] == [100, 100, 100, 7]
    assert all(g == sorted(g) for g in groups)  # batch order within a group
    assert refusals.partition_groups(list(keys), limit=100) == groups
    assert refusals.partition_groups([5, 5, 6], limit=100) == [[0, 1, 2]]  # the common batch: one insert
    assert refusals.partition_groups([], limit=100) == [[]]


def refusing(bad: set[int], calls: list):
    def insert(indexes, path):
        calls.append((tuple(indexes), path))
        if bad & set(indexes):
            raise Refused(StoreErrorKind(DETERMINISTIC, 53), "Code: 53. Type mismatch")
    return insert


def test_isolate_finds_exactly_the_refused_rows_and_stores_the_rest():
    calls: list = []
    refused = isolate(list(range(16)), refusing({3, 11}, calls))
    assert [i for i, _ in refused] == [3, 11]
    assert all(r.kind.code == 53 for _, r in refused)
    stored = {i for idx, _ in calls for i in idx if not {3, 11} & set(idx)}
    assert stored == set(range(16)) - {3, 11}
    assert len(calls) <= 2 * 2 * 4 + 1  # ~2·k·log2(n)
    paths = [p for _, p in calls]
    assert len(paths) == len(set(paths))  # every sub-insert has a token of its own
    calls2: list = []
    isolate(list(range(16)), refusing({3, 11}, calls2))
    assert calls2 == calls  # the same batch always splits the same way


def test_isolate_of_an_accepted_batch_is_one_insert_and_one_refused_row_is_its_dead_letter():
    calls: list = []
    assert isolate([0, 1, 2], refusing(set(), calls)) == []
    assert calls == [((0, 1, 2), "")]
    [(i, why)] = isolate([7], refusing({7}, []))
    assert i == 7 and "Type mismatch" in str(why)


def test_isolate_propagates_what_is_not_a_refusal():
    def insert(indexes, path):
        raise ConnectionError("away")
    with pytest.raises(ConnectionError):
        isolate([0, 1], insert)
