"""The emitter's argument checks: each value held to the event contract on
the caller's thread, refused with the worker's reason code (BadArgument), so
an event the Meter accepts is never dead-lettered for a value. The optional
v2 fields' checks (chunk stats, output_tokens_estimated, the P/D fields) are
in optional.py.
"""

from __future__ import annotations

import math

# The limits are the worker's (one contract, stream_jobs/contract.py, which
# the JSON Schema files are tested against): an event the emitter accepts is
# never dead-lettered for a limit. contract.py is pure: no worker imports.
import phasemeter.stream_jobs.reasons as R
from phasemeter.stream_jobs.contract import (LABEL_FIELDS, MAX_DURATION_S, MAX_EPOCH_S, MAX_TOKENS, MIN_T0,
                                             lone_surrogate)
from phasemeter.stream_jobs.contract import STATUSES as _STATUSES
from phasemeter.stream_jobs.contract import control_character, has_control

STATUSES = frozenset(_STATUSES)
_MODEL, _RID, _FINISH, _REPLICA = (LABEL_FIELDS[k] for k in ("model", "request_id", "finish_reason", "replica"))


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
