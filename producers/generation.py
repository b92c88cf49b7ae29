"""The per-generation context manager, `Generation`: timing one generation
from `Meter.generation()` to its one event.

Durations come from `time.monotonic()` differences so an NTP step during a
generation can never make one negative; `time.time()` is read once, for t0,
only to place the event in time.
"""

from __future__ import annotations

import asyncio
import time

# Names other modules and tests have always found here: the checks
# (checks.py, optional.py) and the encoder (encode.py).
from .checks import MAX_DURATION_S, MAX_TOKENS, STATUSES, BadArgument, check_outcome, check_request  # noqa: F401
from .encode import EVENT_FIELDS, encode, new_request_id  # noqa: F401
from .optional import check_estimated, check_pd


class Generation:
    """One generation being timed; made by `Meter.generation()`.

    Use it as a context manager. Call `scheduled()` when the engine starts the
    request (optional), `first_token()` when the first chunk is ready, and
    `finish(output_tokens, status, finish_reason)` once at the end; the event
    is enqueued by `finish()`; a second `finish()` raises RuntimeError.
    Repeated `scheduled()`/`first_token()` calls and calls after `finish()`
    are ignored (the first one wins). `request_id` is the given id or a
    generated uuid4 hex.

    If the block ends without `finish()`, the event is still emitted with
    output_tokens=0 and finish_reason=null: status "error" when the block
    raised, "cancelled" when it exited normally. ttft_s stays null if
    `first_token()` was never called.

    With phase events on, `Meter.generation()` returns the subclass
    `PhaseGeneration` (phases.py) instead, so this class stays as cheap.

    Streaming callers may call `chunk(n)` (alias `token(n)`) once per chunk
    of n tokens; the event then carries chunks, max_gap_s, gaps_over and
    gap_threshold_s (schema_version 2, docs/metrics.md). State is O(1): a
    count, the last chunk's time, the largest gap, the gaps over the Meter's
    `stall_threshold_s` and a token sum (`counted_tokens`). The gap before
    the first chunk is measured from `first_token()` when that was called;
    otherwise the first chunk IS the first token (it calls `first_token()`)
    and has no gap before it. A generation that never calls chunk() pays one
    attribute store and one test.
    """

    __slots__ = ("_meter", "_model", "_input", "_cached", "_rid", "_replica",
                 "t0", "_start", "_t_sched", "_t_first", "_done",
                 # set by chunk() only; _chunks is 0 until then
                 "_chunks", "_last", "_max_gap", "_over", "_tokens", "_stall")

    def __init__(self, meter, model: str, input_tokens: int, request_id: str | None = None,
                 replica: str | None = None, cached_input_tokens: int | None = None) -> None:
        check_request(model, input_tokens, cached_input_tokens, request_id, replica)
        self._meter = meter
        self._model, self._input, self._cached = model, input_tokens, cached_input_tokens
        self._rid, self._replica = request_id, replica
        self.t0 = time.time()
        self._start = time.monotonic()
        self._t_sched = self._t_first = None
        self._done = False
        self._chunks = 0

    @property
    def request_id(self) -> str:
        if self._rid is None:
            self._rid = new_request_id()
        return self._rid

    def scheduled(self) -> None:
        if self._t_sched is None and not self._done:
            self._t_sched = time.monotonic()

    def first_token(self) -> None:
        if self._t_first is None and not self._done:
            self._t_first = time.monotonic()

    def chunk(self, n: int = 1) -> None:
        """One streamed chunk holding n tokens (0 allowed: a role or empty delta)."""
        if n.__class__ is not int or n < 0:
            raise ValueError(f"chunk(n): n must be an int >= 0, got {n!r}")
        if self._done:
            return
        now = time.monotonic()
        count = self._chunks
        if count:  # the per-chunk path: locals and slots only (bench/bench_chunk_hook.py)
            gap = now - self._last
            if gap > self._max_gap:
                self._max_gap = gap
            if gap > self._stall:
                self._over += 1
        else:
            now = self._first_chunk(now)
        self._last = now
        self._chunks = count + 1
        self._tokens += n

    def _first_chunk(self, now: float) -> float:
        """Set up the chunk state; the time the next gap is measured from."""
        self._tokens = self._over = 0
        self._max_gap = -1.0  # no gap yet: sent as absent, never 0
        self._stall = self._meter._stall_s  # copied once: one slot read per chunk after this
        prev = self._t_first
        if prev is None:
            # The first chunk is the first token: no gap before it, and
            # the next gap is measured from the first token's own reading.
            self.first_token()
            return self._t_first
        gap = now - prev
        self._max_gap = gap
        if gap > self._stall:
            self._over = 1
        return now

    token = chunk  # for callers that think in tokens: g.token() per token

    @property
    def counted_tokens(self) -> int:
        """Tokens passed to chunk() so far: an estimate of output_tokens when
        the server reports no usage (then finish(..., output_tokens_estimated=True))."""
        return self._tokens if self._chunks else 0

    def finish(self, output_tokens: int, status: str = "ok", finish_reason: str | None = None,
               output_tokens_estimated: bool = False, *, prefill_replica: str | None = None,
               decode_replica: str | None = None, kv_transfer_s: float | None = None) -> None:
        """`prefill_replica`, `decode_replica`, `kv_transfer_s`: in prefill/decode
        disaggregated serving, the instances (or pools) that ran each half and
        the seconds the KV cache took between them (docs/phases.md); a router
        knows them by the end. Any of them makes the event schema_version 2."""
        if self._done:
            raise RuntimeError("finish() was already called for this generation")
        try:
            check_outcome(output_tokens, status, finish_reason)
            if output_tokens_estimated is not False:
                check_estimated(output_tokens_estimated)
            pd = None  # passed on, not kept in a slot: the common generation pays no store for it
            if prefill_replica is not None or decode_replica is not None or kv_transfer_s is not None:
                t_first = self._t_first
                pd = check_pd(prefill_replica, decode_replica, kv_transfer_s,
                              None if t_first is None else t_first - self._start, time.monotonic() - self._start)
        except ValueError as exc:
            self._meter._ch.refuse(exc)
            raise
        self._emit(output_tokens, status, finish_reason, output_tokens_estimated, pd)

    def _v2(self, estimated: bool, pd: tuple | None) -> tuple | None:
        """The optional v2 fields, then finish()'s P/D fields `pd` when given,
        or None (the event stays v1) without any."""
        count = self._chunks
        if not count:
            v2 = (None, None, None, None, True if estimated else None)
        else:
            # Counts are clamped to the contract's limit (gaps_over <= chunks holds).
            gap = self._max_gap
            v2 = (min(count, MAX_TOKENS), None if gap < 0 else gap, min(self._over, MAX_TOKENS), self._stall,
                  True if estimated else None)
        return v2 if pd is None else v2 + pd

    def _emit(self, output_tokens: int, status: str, finish_reason: str | None, estimated: bool = False,
              pd: tuple | None = None) -> None:
        end = time.monotonic()
        self._done = True
        start, t_first, t_sched = self._start, self._t_first, self._t_sched
        self._meter._put((
            self.request_id, self._model, self.t0,
            None if t_first is None else t_first - start,
            end - start,
            None if t_sched is None else t_sched - start,
            self._input, output_tokens, self._cached, status, finish_reason, self._replica,
            self._v2(estimated, pd) if self._chunks or estimated or pd is not None else None,
        ))

    def __enter__(self) -> Generation:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if not self._done:
            # A client disconnect surfaces as CancelledError (asyncio servers) or
            # GeneratorExit (a closed streaming generator): that is a cancel,
            # not a server error.
            cancelled = exc_type is None or issubclass(exc_type, (GeneratorExit, asyncio.CancelledError))
            self._emit(0, "cancelled" if cancelled else "error", None)
        return False  # never swallow the caller's exception
