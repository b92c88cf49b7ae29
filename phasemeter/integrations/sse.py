"""The incremental reading of an OpenAI-style response, beside the stream.

`SseObserver` holds what PhasemeterMiddleware (asgi.py) learns from the
response body: the first content, usage, the finish reason and an upstream
error. For SSE it takes the body chunks as they are forwarded and splits
them into events itself, since an event may span chunks and a chunk may
hold many; nothing is held back from the client.

Cost (bench/bench_asgi.py): up to the first token each SSE event is
JSON-parsed; after it a token event is only split off and kept in a ring of
the last TAIL_EVENTS, which `settle()` reads when the response ends (usage,
finish reason and errors come last).

Decode stalls (docs/metrics.md) are timed over data events, as the first
token is: the first token is chunk one; each later event is timed, with its
arrival time, as it leaves the ring, unread (any test of its bytes costs
about what a JSON parse does: bench/bench_asgi.py). `settle()` parses the
ring from its end back to the last event carrying content, so the trailing
events that carry none (finish, usage) are not chunks; a content-less event
before that one is counted (docs/ingest/asgi.md, Limits).
"""

from __future__ import annotations

import collections
import json

from phasemeter.stream_jobs.contract import DEFAULT_STALL_THRESHOLD_S

MAX_CAPTURE_BYTES = 1 << 20   # non-SSE response copied for its `usage`; unfinished SSE event
TAIL_EVENTS = 8  # SSE events kept to read at the end: finish chunk(s), usage chunk, error


class SseObserver:
    """The response-reading half of the middleware's Exchange (its base
    class, so hooks see `usage`, `finish_reason`, `data_events` and the
    first-token time on the Exchange itself). `_sse` is False until the
    response announces text/event-stream, True for SSE, and None when a
    stream so announced turns out not to be SSE (then no guessing)."""

    __slots__ = ("usage", "finish_reason", "data_events", "upstream_error", "t_first", "_sse", "_buf", "_tail",
                 "chunks", "gap_max", "gaps_over", "stall_s", "_t_chunk")

    def __init__(self, stall_s: float = DEFAULT_STALL_THRESHOLD_S) -> None:
        self.usage: dict | None = None
        self.finish_reason: str | None = None
        self.data_events = 0
        self.upstream_error = False
        self.t_first: float | None = None
        self._sse: bool | None = False
        self._buf = b""
        # (event, arrival) pairs; evicted by hand (no maxlen), to be timed as they leave.
        self._tail: collections.deque = collections.deque()
        # The chunk hook's O(1) state: content events timed so far, the largest
        # gap between consecutive ones, how many gaps exceeded stall_s.
        self.chunks = self.gaps_over = 0
        self.gap_max = 0.0
        self.stall_s = stall_s
        self._t_chunk = 0.0

    def _feed(self, chunk: bytes, now: float) -> None:
        buf = self._buf + chunk if self._buf else chunk
        if b"\r" in buf:  # SSE allows CRLF; a CR kept from the last chunk meets its LF here
            buf = buf.replace(b"\r\n", b"\n")
        events = buf.split(b"\n\n")
        self._buf = events.pop()  # the unfinished event, if any
        if len(self._buf) > MAX_CAPTURE_BYTES:  # no event boundary in sight: not SSE after all
            self._buf, self._sse = b"", None
        for event in events:
            if self.t_first is None:  # the few events up to the first token: parsed
                data = _data(event)
                if data is None or data == b"[DONE]":
                    continue
                self.data_events += 1
                obj = _loads(data)
                self._inspect(obj)
                if _has_content(obj):
                    self.t_first = now
                    self._chunk(now)
            elif event.startswith(b"data:") or b"\ndata:" in event:
                # After it, most events are one token each: kept unparsed, and
                # only the last few, where usage, the finish reason and an
                # error arrive, are read at the end (settle).
                if event != b"data: [DONE]":
                    self.data_events += 1
                    tail = self._tail
                    if len(tail) == TAIL_EVENTS:  # leaves the ring: a mid-stream event, a chunk
                        self._chunk(tail.popleft()[1])
                    tail.append((event, now))

    def settle(self) -> None:
        """Read the stream's last events; called once, before the event is built."""
        tail, parsed, last = self._tail, {}, -1
        for i in range(len(tail) - 1, -1, -1):  # back to the last event carrying content
            data = _data(tail[i][0])
            parsed[i] = obj = None if data is None else _loads(data)
            if _has_content(obj):
                last = i
                break
        for i, (event, at) in enumerate(tail):  # in arrival order: the last usage / finish reason wins
            data = _data(event)
            if data is not None and _may_matter(data):
                self._inspect(parsed[i] if i in parsed else _loads(data))
            if i <= last:
                self._chunk(at)
        tail.clear()

    def _chunk(self, at: float) -> None:
        if self.chunks:
            gap = at - self._t_chunk
            if gap > self.gap_max:
                self.gap_max = gap
            if gap > self.stall_s:
                self.gaps_over += 1
        self._t_chunk = at
        self.chunks += 1

    def _inspect(self, obj) -> None:
        """One parsed SSE event, or a whole non-SSE response body (asgi.py):
        the same OpenAI object shape either way."""
        if not isinstance(obj, dict):
            return
        usage = obj.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        if obj.get("error") is not None or obj.get("object") == "error":
            self.upstream_error = True
        choices = obj.get("choices")
        if isinstance(choices, list):
            for choice in choices:
                if isinstance(choice, dict) and isinstance(choice.get("finish_reason"), str):
                    self.finish_reason = choice["finish_reason"]


def _data(event: bytes) -> bytes | None:
    """The data of one SSE event (its data: lines joined), or None if it has none."""
    if event.startswith(b"data:") and b"\n" not in event:
        return event[6:] if event[5:6] == b" " else event[5:]
    lines = [ln[6:] if ln[5:6] == b" " else ln[5:] for ln in event.split(b"\n") if ln.startswith(b"data:")]
    return b"\n".join(lines) if lines else None  # None: a comment, or only event:/id:/retry: fields


def _may_matter(data: bytes) -> bool:
    """Could this event carry usage, a finish reason or an error? Substring
    counts only: a JSON parse per token would cost more than the rest of
    the middleware. Unusual spacing just means a parse, never a miss."""
    for key in (b'"usage"', b'"finish_reason"'):
        i = data.find(key)
        while i >= 0:
            i += len(key)
            if not data.startswith((b":null", b": null"), i):
                return True
            i = data.find(key, i)
    return b'"error"' in data


_decode = json.JSONDecoder().decode  # json.loads minus its encoding sniffing: SSE and JSON here are UTF-8


def _loads(data: bytes):
    try:
        return _decode(data.decode("utf-8"))
    except ValueError:  # malformed JSON or UTF-8 (UnicodeDecodeError is a ValueError)
        return None


def _has_content(obj) -> bool:
    choices = obj.get("choices") if isinstance(obj, dict) else None
    if not isinstance(choices, list):
        return False
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        if choice.get("text"):  # /v1/completions
            return True
        delta = choice.get("delta")
        if isinstance(delta, dict) and any(v for k, v in delta.items() if k != "role"):
            return True
    return False
