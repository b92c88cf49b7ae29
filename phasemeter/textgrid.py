"""Aligned plain-text tables for the commands' table output: one place that
pads columns, so every table reads the same way (labels left, numbers right)."""

from __future__ import annotations


def grid(head: list[str], rows: list[list[str]], right: set[int] | frozenset = frozenset(),
         rule: bool = True) -> list[str]:
    """Lines of `head` and `rows` padded to their widest cell; columns in
    `right` are right-aligned (numbers); `rule`: a dashed line under the head."""
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]

    def line(cells):
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    out = [line(head)] + [line(r) for r in rows]
    if rule:
        out.insert(1, "  ".join("-" * w for w in widths))
    return out
