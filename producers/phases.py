"""Phase events (docs/phases.md, schema_version 2): `start`, `first_token` and
`end`, each sent when it happens and keyed by request_id, so a generation
that never ends is still seen by the worker (as "abandoned").

Like generation events, a phase travels to the sender thread as a plain
tuple and is encoded there. Its first element is the kind; its length is
never len(EVENT_FIELDS), which is how the sender tells the two apart
without touching the one-event path:

    ("start", request_id, model, t0, input_tokens, cached_input_tokens, queue_s, replica, v2)
    ("first_token", request_id, ttft_s, t_first, queue_s, cached_input_tokens)
    ("end", request_id, output_tokens, e2e_s, t_end, status, finish_reason, queue_s, cached_input_tokens,
     ttft_s, v2)

where v2 is None or the optional v2 fields (Generation._v2: chunk data,
output_tokens_estimated; then the P/D fields, optional.with_pd), written
when known; a start's has only the P/D fields set.

Encoding omits every optional field that is unknown (None) -- never null --
except `status`, which the emitter always knows and always sends.
"""

from __future__ import annotations

import time

import phasemeter.stream_jobs.reasons as R

from .checks import (_RID, MAX_TOKENS, BadArgument, check_duration, check_outcome, check_request, count_error,
                     epoch_error, label_error, label_ok)
from .encode import V2_FIELDS, _dumps, new_request_id
from .generation import Generation
from .optional import check_estimated, with_pd

# Epoch bounds for t0/t_first/t_end (the contract's): the worker rejects t0
# before 2000, and an upper bound catches the unit bug of passing milliseconds.
from phasemeter.stream_jobs.contract import MAX_EPOCH_S, MIN_T0 as MIN_EPOCH_S  # noqa: E402
from phasemeter.stream_jobs.contract import control_character, has_control  # noqa: E402


def check_request_id(request_id) -> None:
    # Same rule and message as check_request, which stays free of calls
    # because the one-event hot path runs it on every generation.
    if not (request_id.__class__ is str and 0 < len(request_id) <= _RID and request_id.isprintable()) \
            and not label_ok(request_id, _RID):
        raise label_error("request_id", request_id, _RID)


def check_epoch(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not MIN_EPOCH_S <= value <= MAX_EPOCH_S:
        raise epoch_error(name, value)


def check_count(name: str, value) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                              or not 0 <= value <= MAX_TOKENS):
        raise count_error(name, value, MAX_TOKENS)


def check_seconds(name: str, value) -> None:
    # Type first: check_duration alone would let a str escape as TypeError.
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise BadArgument(f"{name} must be a number of seconds, got {value!r}", R.WRONG_TYPE)
    check_duration(name, value)


def one_of(dur_name: str, dur, ts_name: str, ts) -> None:
    """Exactly one of a monotonic duration and an epoch timestamp."""
    if (dur is None) == (ts is None):
        raise BadArgument(f"give exactly one of {dur_name} (s since t0, preferred) or {ts_name} (epoch s)"
                          + (", not both" if dur is not None else ""),
                          R.BAD_VALUE if dur is not None else R.MISSING_FIELD)
    if dur is None:
        check_epoch(ts_name, ts)
    else:
        check_seconds(dur_name, dur)


# -- low-level API: argument checks -> tuple (Meter.start/first_token/end) -----
def start_item(model, input_tokens, t0, request_id, cached_input_tokens, queue_s, replica, pd=(None,) * 3) -> tuple:
    """`pd`: (prefill_replica, decode_replica, kv_transfer_s), each None when not known."""
    check_count("input_tokens", input_tokens)
    check_count("cached_input_tokens", cached_input_tokens)
    check_request(model, input_tokens, cached_input_tokens, request_id, replica)
    check_seconds("queue_s", queue_s)
    if t0 is None:
        t0 = time.time()
    else:
        check_epoch("t0", t0)
    pd = with_pd(None, *pd, None, None)  # the transfer's bound is checked against the joined TTFT
    # Generated here, not in the sender: the caller needs it for the next phases.
    rid = new_request_id() if request_id is None else request_id
    return ("start", rid, model, t0, input_tokens, cached_input_tokens, queue_s, replica, pd)


def first_token_item(request_id, ttft_s, t_first, queue_s, cached_input_tokens) -> tuple:
    check_request_id(request_id)
    one_of("ttft_s", ttft_s, "t_first", t_first)
    check_seconds("queue_s", queue_s)
    check_count("cached_input_tokens", cached_input_tokens)
    return ("first_token", request_id, ttft_s, t_first, queue_s, cached_input_tokens)


def end_item(request_id, output_tokens, e2e_s, t_end, status, finish_reason, queue_s,
             cached_input_tokens, output_tokens_estimated=False, pd=(None,) * 3) -> tuple:
    check_request_id(request_id)
    check_count("output_tokens", output_tokens)
    check_outcome(output_tokens, status, finish_reason)
    one_of("e2e_s", e2e_s, "t_end", t_end)
    check_seconds("queue_s", queue_s)
    check_count("cached_input_tokens", cached_input_tokens)
    check_estimated(output_tokens_estimated)
    v2 = (None, None, None, None, True) if output_tokens_estimated else None
    return ("end", request_id, output_tokens, e2e_s, t_end, status, finish_reason, queue_s,
            cached_input_tokens, None, with_pd(v2, *pd, None, e2e_s))


# -- context manager -------------------------------------------------------------
class PhaseGeneration(Generation):
    """`Generation` that emits `start` at once, `first_token` at the first
    `first_token()`, and `end` at `finish()` or block exit (same status rules).
    queue_s (from `scheduled()`) rides on first_token if known by then, else
    on end. `end` repeats ttft_s when a first token was seen: phases can
    reach the join out of order (envelopes have no key), and an `end` with 0
    output tokens (a client gone after its first token) must not complete
    the generation without its ttft. A subclass, so the one-event
    `Generation` pays nothing for it."""

    __slots__ = ("_q_sent",)

    def __init__(self, meter, model: str, input_tokens: int, request_id: str | None = None,
                 replica: str | None = None, cached_input_tokens: int | None = None) -> None:
        check_request(model, input_tokens, cached_input_tokens, request_id, replica)
        self._meter = meter
        self._model, self._input, self._cached = model, input_tokens, cached_input_tokens
        self._rid = new_request_id() if request_id is None else request_id
        self._replica = replica
        self.t0 = time.time()
        self._start = time.monotonic()
        self._t_sched = self._t_first = None
        self._done = self._q_sent = False
        self._chunks = 0
        meter._put(("start", self._rid, model, self.t0, input_tokens, cached_input_tokens, None, replica, None))

    def first_token(self) -> None:
        if self._t_first is None and not self._done:
            t = self._t_first = time.monotonic()
            t_sched = self._t_sched
            queue_s = None if t_sched is None else t_sched - self._start
            self._q_sent = queue_s is not None
            self._meter._put(("first_token", self._rid, t - self._start, None, queue_s, None))

    def _emit(self, output_tokens: int, status: str, finish_reason: str | None, estimated: bool = False,
              pd: tuple | None = None) -> None:
        end = time.monotonic()
        self._done = True
        t_sched = self._t_sched
        queue_s = None if t_sched is None or self._q_sent else t_sched - self._start
        t_first = self._t_first
        self._meter._put(("end", self._rid, output_tokens, end - self._start, None, status,
                          finish_reason, queue_s, None, None if t_first is None else t_first - self._start,
                          self._v2(estimated, pd) if self._chunks or estimated or pd is not None else None))


# -- encoder (sender thread) --------------------------------------------------------
def encode_phase(item: tuple, gateway: str | None) -> tuple[bytes, bytes]:
    """Phase tuple -> (key, value) exactly as docs/phases.md says; fields in
    the contract's order, unknown optional fields omitted."""
    kind, rid = item[0], item[1]
    ev = {"schema_version": 2, "kind": kind, "request_id": rid}
    if kind == "start":
        _, _, model, t0, input_tokens, cached, queue_s, replica, v2 = item
        ev["model"], ev["t0"], ev["input_tokens"] = model, t0, input_tokens
        opt = (("cached_input_tokens", cached), ("queue_s", queue_s), ("gateway", gateway),
               ("replica", replica))
        if v2 is not None:  # with_pd's tuple: no v2 field of the end, then the P/D fields
            opt += tuple(zip(V2_FIELDS, v2))
    elif kind == "first_token":
        _, _, ttft_s, t_first, queue_s, cached = item
        opt = (("ttft_s", ttft_s), ("t_first", t_first), ("queue_s", queue_s),
               ("cached_input_tokens", cached))
    elif kind == "end":
        _, _, output_tokens, e2e_s, t_end, status, finish_reason, queue_s, cached, ttft_s, v2 = item
        ev["output_tokens"] = output_tokens
        opt = (("e2e_s", e2e_s), ("t_end", t_end), ("status", status), ("finish_reason", finish_reason),
               ("queue_s", queue_s), ("cached_input_tokens", cached), ("ttft_s", ttft_s))
        if v2 is not None:
            opt += tuple(zip(V2_FIELDS, v2))
    else:
        raise ValueError(f"unknown phase kind {kind!r}")
    for name, value in opt:
        if value is not None:
            ev[name] = value
    return rid.encode("utf-8"), _dumps(ev).encode("utf-8")
