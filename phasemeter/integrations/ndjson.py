"""NDJSON event lines, read and checked exactly as the worker would check them.

One line is one Kafka message value, as a gateway would send it: a v1/v2
`generation` event, a v2 phase event (`start`, `first_token`, `end`) or an
envelope (`kind: "batch"`). `LineChecker` runs each line through the worker's
own `stream_jobs.derive.process_message`, so there is one contract: a line
refused here carries the reason code the worker would dead-letter it with,
and a line accepted here is never dead-lettered for its own content.

What one line cannot show stays the worker's to decide: a request_id stored
before (`duplicate`), phases whose `start` never comes (`orphan_phase`) or
that come too late (`late_phase`), and cross-phase order.

Pure apart from reading the stream it is given: no Kafka, no files opened here.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import BinaryIO, Iterator

from phasemeter.stream_jobs import reasons as R
from phasemeter.stream_jobs.buckets import Bucketer, parse_edges
from phasemeter.stream_jobs.contract import MIN_T0, oldest_kept
from phasemeter.stream_jobs.derive import Phase, Rejection, process_message

_SKIP_CHUNK = 1 << 16  # how much of an oversize line is read at a time while skipping it
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True, slots=True)
class RawLine:
    lineno: int          # 1-based, blank lines included, so it matches an editor's numbering
    data: bytes | None   # without its end of line; None when longer than the limit
    size: int            # bytes of the line without its end of line


@dataclass(frozen=True, slots=True)
class Accepted:
    lineno: int
    key: bytes | None    # the emitter's rule: request_id for one event, no key for an envelope
    value: bytes
    events: int          # events the line carries (an envelope carries several)


@dataclass(frozen=True, slots=True)
class Refused:
    lineno: int
    rejections: tuple[Rejection, ...]  # one per event the worker would dead-letter

    @property
    def reason(self) -> str:
        return self.rejections[0].reason

    @property
    def detail(self) -> str:
        return self.rejections[0].detail


def read_lines(stream: BinaryIO, max_bytes: int) -> Iterator[RawLine]:
    """Lines of a binary stream, "\\n" or "\\r\\n" terminated, the last one
    possibly not. Memory stays bounded by `max_bytes` whatever the input: a
    longer line is skipped in chunks and reported by its size only."""
    limit = max_bytes + 2  # room for the content plus "\r\n"
    lineno = 0
    while True:
        line = stream.readline(limit)
        if not line:
            return
        lineno += 1
        if line.endswith(b"\n"):
            line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
        elif len(line) == limit:  # cut by the limit, not at an end of line
            yield RawLine(lineno, None, len(line) + _skip_rest(stream))
            continue
        if lineno == 1 and line.startswith(_BOM):
            # A byte-order mark is an artefact of the editor that wrote the
            # file, not part of the event: it would make line 1 malformed_json.
            line = line[len(_BOM):]
        yield RawLine(lineno, line, len(line))


def _skip_rest(stream: BinaryIO) -> int:
    """Read to the end of the current line; return the bytes skipped (its EOL not counted)."""
    skipped = 0
    while True:
        part = stream.readline(_SKIP_CHUNK)
        if not part:
            return skipped
        if part.endswith(b"\n"):
            return skipped + len(part) - (2 if part.endswith(b"\r\n") else 1)
        skipped += len(part)


class LineChecker:
    """Checks one line with the worker's validation. `max_bytes` and
    `bucket_edges` are the worker's settings (PHASEMETER_MAX_MESSAGE_BYTES,
    PHASEMETER_BUCKET_EDGES); the edges only feed the derivation the worker
    runs after validation, which is run here too so nothing is skipped."""

    def __init__(self, max_bytes: int, bucket_edges: str = "default", raw_ttl_days: int | None = None) -> None:
        if not isinstance(max_bytes, int) or max_bytes < 1:
            raise ValueError(f"max_bytes must be a positive int, got {max_bytes!r}")
        self.max_bytes = max_bytes
        self._bucket = Bucketer(parse_edges(bucket_edges))
        # The worker's PHASEMETER_RAW_TTL_DAYS: an older event would be
        # dead-lettered (outside_retention), never stored. None: no bound.
        self.raw_ttl_days = raw_ttl_days

    def check(self, line: RawLine, now: float | None = None) -> Accepted | Refused | None:
        """Accepted, Refused, or None for a blank line (skipped, never sent)."""
        if line.data is None:
            # The worker's own wording (derive.parse) for the same case.
            return Refused(line.lineno, (Rejection(R.OVERSIZE, f"{line.size} bytes > limit {self.max_bytes}"),))
        data = line.data
        if not data.strip():
            return None
        now = time.time() if now is None else now
        try:
            oldest = MIN_T0 if self.raw_ttl_days is None else oldest_kept(now, self.raw_ttl_days)
            results = process_message(data, self._bucket, self.max_bytes, now, oldest=oldest)
        except Exception as exc:  # the worker turns a bug of ours into internal_error; so do we
            return Refused(line.lineno, (Rejection(R.INTERNAL, f"{type(exc).__name__}: {str(exc)[:200]}"),))
        bad = tuple(r for r in results if isinstance(r, Rejection))
        if bad:
            # An envelope is refused whole even if only one inner event is bad:
            # sending the rest would make a corrected re-run store them twice.
            return Refused(line.lineno, bad)
        return Accepted(line.lineno, _key(data, results), data, len(results))


def _key(data: bytes, results: list) -> bytes | None:
    if len(results) == 1:
        # Only the top-level kind tells one event from an envelope of one;
        # parsing again costs a few microseconds on a line already accepted.
        if json.loads(data).get("kind") != "batch":
            first = results[0]
            rid = first.request_id if isinstance(first, Phase) else first["request_id"]
            return rid.encode("utf-8")
    return None
