"""Limits and labels of the event contract, shared by both protocols, and the
Rejection every validator returns: the one source of these values. The worker
(derive.py, phase_events.py) validates with them, the emitter
(producers/generation.py, phases.py) checks its arguments with them, and a
test holds schema/event-v1.schema.json and event-v2.schema.json to them.
Pure and dependency-free, so the gateway install can import it."""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import reasons as R

SCHEMA_VERSIONS = (1, 2)  # 2 adds the phase kinds; a v2 generation equals a v1 one
MAX_TOKENS = 10_000_000
MAX_DURATION_S = 86_400.0
MIN_T0 = 946_684_800.0  # 2000-01-01: anything earlier is a unit bug (ms? 0?)
# The latest epoch a static check can state (the JSON Schema, the emitter):
# 2100-01-01. The worker's own bound is tighter: now + 1 day.
MAX_EPOCH_S = 4_102_444_800.0
STATUSES = ("ok", "error", "cancelled")
LABEL_FIELDS = {"model": 200, "request_id": 128, "finish_reason": 64, "gateway": 200, "replica": 200}


@dataclass(frozen=True)
class Rejection:
    reason: str   # one of reasons.ALL
    detail: str   # human text naming the field; never the whole payload


def check_count(name: str, value) -> Rejection | None:
    """A token count: an int in [0, MAX_TOKENS] (a bool is not a count)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return Rejection(R.WRONG_TYPE, f"{name} must be an integer, got {type(value).__name__}")
    if value < 0:
        return Rejection(R.NEGATIVE, f"{name}={value} < 0")
    if value > MAX_TOKENS:
        return Rejection(R.ABSURD, f"{name}={value} > {MAX_TOKENS}")
    return None


def check_number(name: str, value) -> Rejection | None:
    """A JSON number (a bool is not one) that is finite."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return Rejection(R.WRONG_TYPE, f"{name} must be a number, got {type(value).__name__}")
    if not math.isfinite(value):
        return Rejection(R.NOT_FINITE, f"{name} is {value}")
    return None


def check_duration(name: str, value, max_s: float | None = MAX_DURATION_S) -> Rejection | None:
    """Seconds since t0: a negative one means an impossible ordering (t_first
    before t0, ...), one over `max_s` a unit bug. `max_s=None` for t0 itself,
    whose range is checked as epoch seconds."""
    bad = check_number(name, value)
    if bad is None and value < 0:
        bad = Rejection(R.IMPOSSIBLE_ORDER, f"{name}={value} < 0")
    if bad is None and max_s is not None and value > max_s:
        bad = Rejection(R.ABSURD, f"{name}={value} s is longer than a day")
    return bad
