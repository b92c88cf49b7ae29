"""Text for a terminal: control characters escaped, and aligned plain-text
tables for the commands' table output (one place that pads columns, so every
table reads the same way: labels left, numbers right).

Labels come from senders, and a stored label may hold anything: ESC, NUL,
CR, an OSC sequence that sets the terminal's title. `printable` is the one
rule every text output (tables, CSV, listings) applies to what it prints:
each control character (Unicode category Cc: U+0000-U+001F, U+007F-U+009F)
becomes the four characters `\\xNN`. Nothing else changes, so ordinary
labels print as they are; JSON output escapes the same characters by JSON's
own rules (`\\u001b`) and keeps the exact value.
"""

from __future__ import annotations

import re

_CONTROL_CODES = [*range(0x00, 0x20), *range(0x7F, 0xA0)]
# The same set as a regular expression class, for callers that find the
# values to escape in bulk (csv_text.py over Arrow arrays) before applying
# `printable` to them.
CONTROL_CLASS = "[\\x00-\\x1f\\x7f-\\x9f]"
_ESCAPES = {c: f"\\x{c:02x}" for c in _CONTROL_CODES}
_HAS_CONTROL = re.compile(CONTROL_CLASS)


def printable(text: str) -> str:
    """`text` with every control character written as `\\xNN`."""
    return text.translate(_ESCAPES) if _HAS_CONTROL.search(text) else text


def printable_lines(text: str) -> str:
    """A multi-line text made by code that did not escape its values: each
    line escaped, the line breaks between them kept."""
    return "\n".join(printable(line) for line in text.split("\n"))


def grid(head: list[str], rows: list[list[str]], right: set[int] | frozenset = frozenset(),
         rule: bool = True) -> list[str]:
    """Lines of `head` and `rows` padded to their widest cell; columns in
    `right` are right-aligned (numbers); `rule`: a dashed line under the head.
    Every cell is escaped (`printable`) before it is measured."""
    head = [printable(c) for c in head]
    rows = [[printable(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]

    def line(cells):
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    out = [line(head)] + [line(r) for r in rows]
    if rule:
        out.insert(1, "  ".join("-" * w for w in widths))
    return out
