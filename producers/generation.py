"""The event itself: argument checks, the per-generation context manager,
and the encoder the sender thread uses.

An event travels from caller to sender thread as a plain tuple in EVENT_FIELDS
order (cheapest to build); `encode` turns it into the schema's JSON.

Durations come from `time.monotonic()` differences so an NTP step during a
generation can never make one negative; `time.time()` is read once, for t0,
only to place the event in time.
"""

from __future__ import annotations

import asyncio
import json
import math
import numbers
import os
import random
import time

# The limits are the worker's (one contract, stream_jobs/contract.py, which
# the JSON Schema files are tested against): an event the emitter accepts is
# never dead-lettered for a limit. contract.py is pure: no worker imports.
import phasemeter.stream_jobs.reasons as R
from phasemeter.stream_jobs.contract import (LABEL_FIELDS, MAX_DURATION_S, MAX_EPOCH_S, MAX_TOKENS, MIN_T0,
                                             V2_OPTIONAL, check_gap_within, check_v2_optional, lone_surrogate)
from phasemeter.stream_jobs.contract import STATUSES as _STATUSES
from phasemeter.stream_jobs.contract import control_character, has_control

STATUSES = frozenset(_STATUSES)
_MODEL, _RID, _FINISH, _REPLICA = (LABEL_FIELDS[k] for k in ("model", "request_id", "finish_reason", "replica"))
EVENT_FIELDS = ("request_id", "model", "t0", "ttft_s", "e2e_s", "queue_s", "input_tokens",
                "output_tokens", "cached_input_tokens", "status", "finish_reason", "replica", "v2")
# The last element, "v2", is None for the common event (encoded as v1, as
# before), else the tuple of the contract's optional v2 fields in V2_OPTIONAL
# order (chunks, max_gap_s, gaps_over, gap_threshold_s, output_tokens_estimated);
# an event carrying it is encoded as schema_version 2.

# uuid.uuid4() reads os.urandom, a syscall that releases the GIL; on a busy
# process, getting the GIL back can take milliseconds. A private PRNG seeded
# from os.urandom gives the same uuid4 hex layout in ~0.3 us. Private so that
# random.seed() elsewhere cannot make ids repeat; reseeded in forked children
# so pre-fork workers do not share a sequence.
_rng = random.Random()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_rng.seed)
_UUID4_KEEP = ~((0xF << 76) | (0x3 << 62)) & ((1 << 128) - 1)
_UUID4_SET = (0x4 << 76) | (0x2 << 62)  # version 4, RFC 4122 variant


class BadArgument(ValueError):
    """An argument the event contract does not admit, refused at the call and
    never queued. `reason` is the worker's reason code for the same value
    (stream_jobs/reasons.py), so the emitter, `phasemeter emit` and the OTLP
    receiver count refusals alike (Meter.refusals())."""

    def __init__(self, message: str, reason: str = R.BAD_VALUE) -> None:
        super().__init__(message)
        self.reason = reason


def encodable(text: str) -> bool:
    """True when UTF-8 can encode `text` (the contract's rule, which the
    worker dead-letters as not_utf8). False for a lone surrogate, which
    json.loads makes of an escaped "\\ud800": such an event could never be
    sent, so it is refused at the call instead of failing in the sender."""
    return lone_surrogate(text) is None


def label_error(name: str, value, limit: int) -> BadArgument:
    """The refusal of a label that failed the one-line check of its caller
    (a str of 1..limit characters UTF-8 can encode); built only on failure."""
    message = f"{name} must be a non-empty str of at most {limit} characters"
    if not isinstance(value, str):
        return BadArgument(f"{message}, got {type(value).__name__}", R.WRONG_TYPE)
    bad = lone_surrogate(value, name) or control_character(name, value)
    if bad is not None:
        return BadArgument(bad.detail, bad.reason)
    return BadArgument(f"{message}, got {len(value)}", R.BAD_VALUE)


def count_error(name: str, value, high) -> BadArgument:
    message = f"{name} must be an int in [0, {high}], got {value!r}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return BadArgument(message, R.WRONG_TYPE)
    if value != value or value in (math.inf, -math.inf):
        return BadArgument(message, R.NOT_FINITE)
    return BadArgument(message, R.NEGATIVE if value < 0 else R.ABSURD)


def epoch_error(name: str, value) -> BadArgument:
    """A phase's t0 / t_first / t_end outside the contract's static bounds."""
    message = f"{name} must be epoch seconds in [{MIN_T0:.0f}, {MAX_EPOCH_S:.0f}], got {value!r}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return BadArgument(message, R.WRONG_TYPE)
    return BadArgument(message, R.NOT_FINITE if value != value or value in (math.inf, -math.inf) else R.ABSURD)


def check_t0(value) -> None:
    """record()'s t0, when it is not a plain float or int (the caller tests
    those inline): a finite number, since NaN or Infinity could not be
    encoded. Its range is the worker's to judge (absurd), as before."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadArgument(f"t0 must be a finite number of epoch seconds, got {value!r}",
                          R.NOT_FINITE if isinstance(value, float) else R.WRONG_TYPE)


_bits = _rng.getrandbits  # bound once: the reseed after a fork keeps the same generator


def new_request_id() -> str:
    # The same text as "%032x" % n in half the time (~150 ns, not ~290): a
    # Generation whose caller gave no id makes one on the caller's thread.
    return (_bits(128) & _UUID4_KEEP | _UUID4_SET).to_bytes(16, "big").hex()


def label_ok(value, limit: int) -> bool:
    """The rule of a label: a str of 1..limit printable characters UTF-8 can
    encode (contract.has_control: the worker dead-letters a control
    character). Callers test a remembered label inline first (label_seen)
    and call this only for a label not seen yet, or for request_id (every
    one is new) after one C scan (isprintable: a printable str holds
    neither a control character nor a lone surrogate)."""
    return isinstance(value, str) and 0 < len(value) <= limit and encodable(value) and not has_control(value)


# Labels repeat: a gateway serves a few models, from a few replicas, with a
# few finish reasons. Their full check scans every character (~50-150 ns
# each, three per event), so one that passed is remembered per field and the
# next call pays a set lookup (~10 ns; docs/performance/emitter.md). Only an
# exact str is looked up (another object, a str subclass, could compare
# equal to a remembered label and be something else), only what passed
# label_ok is added, and each set is bounded: past _SEEN_MAX labels a new one
# takes the full check at every call, so hostile labels cost time, not memory.
_SEEN_MAX = 1024
_MODELS: set[str] = set()
_REPLICAS: set[str] = set()
_FINISHES: set[str] = set()


def label_seen(value, limit: int, seen: set) -> bool:
    """label_ok for a label not remembered yet; remembers it when it passes."""
    if not label_ok(value, limit):
        return False
    if value.__class__ is str and len(seen) < _SEEN_MAX:
        seen.add(value)
    return True


def check_request(model, input_tokens, cached_input_tokens, request_id, replica) -> None:
    """Programmer errors raise BadArgument (a ValueError) naming the argument.
    A label already seen costs one set lookup (label_seen); request_id, new
    at every call, one C scan (label_ok says why)."""
    if not (model.__class__ is str and model in _MODELS) and not label_seen(model, _MODEL, _MODELS):
        raise label_error("model", model, _MODEL)
    try:
        bad = not 0 <= input_tokens <= MAX_TOKENS or cached_input_tokens is not None \
            and not 0 <= cached_input_tokens <= input_tokens
    except (TypeError, ArithmeticError):  # None, a str, a Decimal NaN: never a TypeError out
        bad = True
    if bad:
        if input_tokens is None or isinstance(input_tokens, bool) or not isinstance(input_tokens, (int, float)) \
                or not 0 <= input_tokens <= MAX_TOKENS:
            raise count_error("input_tokens", input_tokens, MAX_TOKENS)
        bad = count_error("cached_input_tokens", cached_input_tokens, "input_tokens")
        if bad.reason == R.ABSURD:  # a count, but more than input_tokens: the worker's inconsistent
            bad.reason = R.INCONSISTENT
        raise bad
    if request_id is not None and not (request_id.__class__ is str and 0 < len(request_id) <= _RID
                                       and request_id.isprintable()) \
            and not label_ok(request_id, _RID):
        raise label_error("request_id", request_id, _RID)
    # Empty labels are refused here: the worker would dead-letter them (bad_value).
    if replica is not None and not (replica.__class__ is str and replica in _REPLICAS) \
            and not label_seen(replica, _REPLICA, _REPLICAS):
        raise label_error("replica", replica, _REPLICA)


def check_outcome(output_tokens, status, finish_reason) -> None:
    try:
        bad = not 0 <= output_tokens <= MAX_TOKENS
    except (TypeError, ArithmeticError):
        bad = True
    if bad:
        raise count_error("output_tokens", output_tokens, MAX_TOKENS)
    if status not in STATUSES:
        raise BadArgument(f"status must be one of 'ok', 'error', 'cancelled', got {status!r}")
    if finish_reason is not None and not (finish_reason.__class__ is str and finish_reason in _FINISHES) \
            and not label_seen(finish_reason, _FINISH, _FINISHES):
        raise label_error("finish_reason", finish_reason, _FINISH)


def check_estimated(value) -> None:
    if value.__class__ is not bool:
        raise BadArgument(f"output_tokens_estimated must be a bool, got {value!r}", R.WRONG_TYPE)


def check_threshold(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_DURATION_S:
        raise BadArgument(f"stall_threshold_s must be seconds in (0, {MAX_DURATION_S:g}], got {value!r}")
    return float(value)


def check_stalls(chunks, max_gap_s, gaps_over, gap_threshold_s, e2e_s) -> tuple:
    """record()'s chunk stats, held to the worker's own rules (contract.py:
    types, ranges, gaps_over <= chunks, max_gap_s <= e2e_s, ...), so an
    accepted event is never dead-lettered for them. The four checked fields
    in V2_OPTIONAL order. Only called when one of them is given: the common
    record() pays nothing."""
    given = {"chunks": chunks, "max_gap_s": max_gap_s, "gaps_over": gaps_over,
             "gap_threshold_s": gap_threshold_s}
    out: dict = {}
    bad = check_v2_optional(given, out) or check_gap_within(out["max_gap_s"], e2e_s)
    if bad is not None:
        # The contract's detail names the field, which is also the argument's name.
        raise BadArgument(f"record(): {bad.detail}", bad.reason)
    return out["chunks"], out["max_gap_s"], out["gaps_over"], out["gap_threshold_s"]


def check_duration(name: str, value) -> None:
    if value is None:
        return
    try:
        ok = 0 <= value <= MAX_DURATION_S
    except (TypeError, ArithmeticError):  # a str, a Decimal NaN: refused, never raised as such
        ok = False
    if not ok:
        message = f"{name} must give a duration in [0, {MAX_DURATION_S:g}] s, got {value!r}"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BadArgument(message, R.WRONG_TYPE)
        raise BadArgument(message, R.NOT_FINITE if value != value else R.IMPOSSIBLE_ORDER if value < 0 else R.ABSURD)


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
               output_tokens_estimated: bool = False) -> None:
        if self._done:
            raise RuntimeError("finish() was already called for this generation")
        try:
            check_outcome(output_tokens, status, finish_reason)
            if output_tokens_estimated is not False:
                check_estimated(output_tokens_estimated)
        except ValueError as exc:
            self._meter._ch.refuse(exc)
            raise
        self._emit(output_tokens, status, finish_reason, output_tokens_estimated)

    def _v2(self, estimated: bool) -> tuple | None:
        """The optional v2 fields, or None (the event stays v1) without any."""
        count = self._chunks
        if not count:
            return (None, None, None, None, True) if estimated else None
        # Counts are clamped to the contract's limit (gaps_over <= chunks holds).
        gap = self._max_gap
        return (min(count, MAX_TOKENS), None if gap < 0 else gap, min(self._over, MAX_TOKENS), self._stall,
                True if estimated else None)

    def _emit(self, output_tokens: int, status: str, finish_reason: str | None, estimated: bool = False) -> None:
        end = time.monotonic()
        self._done = True
        start, t_first, t_sched = self._start, self._t_first, self._t_sched
        self._meter._put((
            self.request_id, self._model, self.t0,
            None if t_first is None else t_first - start,
            end - start,
            None if t_sched is None else t_sched - start,
            self._input, output_tokens, self._cached, status, finish_reason, self._replica,
            self._v2(estimated) if self._chunks or estimated else None,
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


def _number(value):
    """A number json cannot write itself (numpy.int64, Decimal, Fraction: the
    checks compare them as numbers and let them in) as the int or float it
    is; anything else stays a TypeError (the sender counts the event failed)."""
    if isinstance(value, numbers.Integral) or isinstance(value, numbers.Rational) and value.denominator == 1:
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, numbers.Number) and not isinstance(value, numbers.Complex):  # Decimal
        f = float(value)
        return int(value) if f.is_integer() else f  # Decimal(5) is a count the worker takes as 5
    raise TypeError(f"{type(value).__name__} is not JSON")


# allow_nan=False: NaN/Infinity are not JSON; such an event counts as failed
# instead of poisoning the topic for every consumer.
_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=_number).encode


def encode(item: tuple, gateway: str | None) -> tuple[bytes, bytes]:
    """Event tuple -> (key, value) exactly as schema/event-v1.schema.json says,
    or event-v2's `generation` when it carries optional v2 fields (only the
    known ones are written: an absent field is unknown, never null)."""
    (rid, model, t0, ttft_s, e2e_s, queue_s, input_tokens, output_tokens,
     cached, status, finish_reason, replica, v2) = item
    if rid is None:  # record() without an id: generated here, off the caller's path
        rid = new_request_id()
    ev = {
        "schema_version": 1, "kind": "generation", "request_id": rid, "model": model,
        "t0": t0, "ttft_s": ttft_s, "e2e_s": e2e_s, "queue_s": queue_s,
        "input_tokens": input_tokens, "output_tokens": output_tokens,
        "cached_input_tokens": cached, "status": status, "finish_reason": finish_reason,
        "gateway": gateway, "replica": replica,
    }
    if v2 is not None:
        ev["schema_version"] = 2
        ev.update((name, value) for name, value in zip(V2_OPTIONAL, v2) if value is not None)
    return rid.encode("utf-8"), _dumps(ev).encode("utf-8")
