"""The duplicate rule of a batch (stream_jobs/dedup.py), pure."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from phasemeter.stream_jobs import dedup

JOINED = "gen.joined"


def rows(*ids, t0=100.0):
    return SimpleNamespace(request_ids=list(ids), ts=np.arange(len(ids), dtype=np.float64) + t0)


def test_a_batch_of_one_topic_is_one_scope_over_its_time_range():
    [scope] = dedup.scopes(rows("a", "b", "a"), np.array([0, 0, 1]), np.zeros(3, dtype=bool), ["gen", "gen"],
                           JOINED)
    assert (scope.topic, scope.rows, scope.ids, scope.unique) == ("gen", range(3), ["a", "b", "a"], ["a", "b"])
    assert (scope.lo, scope.hi) == (100.0 - 0.002, 102.0 + 0.002)
    assert dedup.scopes(rows(), np.array([], dtype=np.int64), np.zeros(0, dtype=bool), ["gen"], JOINED) == []


def test_the_joined_scope_comes_first_and_holds_the_rows_joined_in_the_batch():
    gens = rows("a", "b", "c", "d")
    scopes = dedup.scopes(gens, np.array([0, 1, 2, 2]), np.array([False, False, False, True]),
                          ["gen", JOINED, "gen"], JOINED)
    assert [(s.topic, s.rows, s.ids) for s in scopes] == [(JOINED, [1, 3], ["b", "d"]), ("gen", [0, 2], ["a", "c"])]
    # Rows already dropped (a re-read the store holds) are in no scope, nor in its time range.
    [scope] = dedup.scopes(gens, np.array([0, 0, 0, 0]), np.zeros(4, dtype=bool), ["gen"], JOINED, {0, 1})
    assert (scope.rows, scope.ids, scope.lo) == ([2, 3], ["c", "d"], 102.0 - 0.002)


def test_a_repeat_or_a_stored_request_id_is_dropped_dead_lettered_outside_the_joined_scope():
    gens = rows("a", "b", "a", "c", "b", "e")
    scopes = dedup.scopes(gens, np.array([0, 0, 0, 1, 2, 2]), np.array([False] * 5 + [True]),
                          ["gen", JOINED, JOINED], JOINED)
    assert [s.topic for s in scopes] == [JOINED, "gen"]
    nothing = dedup.answer(scopes, [set(), set()], JOINED)
    assert (nothing.dropped, nothing.letters, nothing.rejoined) == ({2}, [(2, "a")], 0)
    stored = dedup.answer(scopes, [{"e"}, {"b"}], JOINED)
    assert (stored.dropped, stored.letters, stored.rejoined) == ({5, 1, 2}, [(1, "b"), (2, "a")], 1)
    # Each scope alone: a request_id stored from another scope's topics is not a duplicate here.
    assert dedup.answer(scopes, [{"a"}, set()], JOINED).dropped == {2}


@settings(max_examples=300)
@given(st.lists(st.sampled_from("abcdef"), max_size=40), st.sets(st.sampled_from("abcdefg")),
       st.lists(st.booleans(), min_size=40, max_size=40), st.booleans())
def test_the_answer_is_the_rule_read_row_by_row(ids, held, joined, listed):
    """Whatever the repeats and the stored ids: a row is kept iff it is its request_id's first in its scope and
    the store holds none of that id; what is dropped is a letter outside the joined scope, a rejoin inside it."""
    gens = rows(*ids)
    scopes = dedup.scopes(gens, np.arange(len(ids)), np.array(joined[:len(ids)], dtype=bool),
                          ["gen"] * len(ids), JOINED, {0} if listed and ids else frozenset())
    got = dedup.answer(scopes, [set(held)] * len(scopes), JOINED)
    dropped, letters, rejoined = set(), [], 0
    for scope in scopes:
        seen = set(held)
        for row, rid in zip(scope.rows, scope.ids, strict=True):
            if rid in seen:
                dropped.add(row)
                letters += [] if scope.topic == JOINED else [(row, rid)]
                rejoined += scope.topic == JOINED
            seen.add(rid)
    assert (got.dropped, got.letters, got.rejoined) == (dropped, letters, rejoined)
