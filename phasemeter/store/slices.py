"""Bound lists cut to fit one bound value of a ClickHouse server.

A server refuses a bound value longer than `http_max_field_value_size`
(128 KiB by default), in the URL and in a form body alike. chDB takes
parameters in-process with no such limit, so only a server would fail, and
only once a list grows with its batch: a worker that cannot run its repair
retries it forever, paused. A statement that binds such a list runs once per
slice; each caller's statement gives the same answer per slice as for the
whole (a cell's repair looks at that cell only).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

# Text per slice, under 131,072 with room for the brackets, quotes and
# separators the client adds around each value.
MAX_BOUND_CHARS = 100_000


def slices(items: Iterable, chars: Callable[[object], int], limit: int = MAX_BOUND_CHARS) -> Iterator[list]:
    """`items` in order, cut into lists whose `chars` add up to at most
    `limit` (an item larger than the limit alone is a slice of its own)."""
    part: list = []
    used = 0
    for item in items:
        n = chars(item)
        if part and used + n > limit:
            yield part
            part, used = [], 0
        part.append(item)
        used += n
    if part:
        yield part


def cell_chars(cell: tuple) -> int:
    """Worst-case bound text of a (model, bucket, time[, ...]) cell: every
    character of the labels escaped, plus the time literal and punctuation."""
    return sum(2 * len(v) if isinstance(v, str) else 24 for v in cell) + 8
