"""Bound lists cut under a server's limit on one bound value."""

from __future__ import annotations

from datetime import datetime

from hypothesis import given
from hypothesis import strategies as st

from phasemeter.store.slices import MAX_BOUND_CHARS, cell_chars, slices


@given(st.lists(st.integers(0, 50)), st.integers(1, 120))
def test_slices_keep_order_cover_everything_and_stay_under_the_limit(sizes, limit):
    parts = list(slices(sizes, lambda n: n, limit))
    assert [x for p in parts for x in p] == sizes
    assert all(p for p in parts)
    # A slice goes over the limit only when one item alone does.
    assert all(sum(p) <= limit or len(p) == 1 for p in parts)
    # And a slice ends only where the next item would not have fitted.
    assert all(sum(a) + b[0] > limit for a, b in zip(parts[:-1], parts[1:], strict=True))


def test_a_cell_counts_every_label_character_twice_for_escapes():
    cell = ("m" * 200, "512-2k", datetime(2026, 12, 3, 1, 0))
    assert cell_chars(cell) == 2 * 200 + 2 * 6 + 24 + 8
    worst = len(list(slices([cell] * 1000, cell_chars)))
    per_statement = MAX_BOUND_CHARS // cell_chars(cell)  # 225 of the widest cells
    assert per_statement == 225 and worst == -(-1000 // per_statement)
