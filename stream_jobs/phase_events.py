"""Validation of phase events (schema_version 2: start, first_token, end); pure, like derive.py.

Ingest validates a phase on arrival, so a bad one is dead-lettered at once and the join sees only valid phases.
Checks across phases (t_end before t_first, ...) run on the joined generation, in `derive.validate`: the one
derivation of both paths.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import reasons as R
from .contract import (COUNTS, DURATIONS, LABEL_FIELDS, MAX_DURATION_S, MIN_T0, PD_FIELDS, V2_OPTIONAL, Rejection,
                       check_count, check_duration, check_gap, check_gap_within, check_label, check_number,
                       check_status, check_v2_optional)

PHASE_KINDS = ("start", "first_token", "end")
PHASE_VERSION = 2
_COMMON = ("schema_version", "kind", "request_id")
# kind -> (required, optional, alternatives: exactly one of them). P/D fields ride on the start or the end,
# whichever knew them (a router knows both replicas at the start; an OTLP half knows its own).
SPEC = {
    "start": (("model", "t0", "input_tokens"), ("cached_input_tokens", "queue_s", "gateway", "replica")
              + PD_FIELDS, ()),
    "first_token": ((), ("queue_s", "cached_input_tokens"), ("ttft_s", "t_first")),
    "end": (("output_tokens",), ("status", "finish_reason", "queue_s", "cached_input_tokens", "ttft_s", "t_first")
            + V2_OPTIONAL + PD_FIELDS, ("e2e_s", "t_end")),
}


@dataclass(frozen=True)
class Phase:
    """A valid phase event on its way to the join (stream_jobs/join.py)."""
    request_id: str
    fields: dict  # normalised: "kind" plus the fields it carried, nulls dropped


def _check_number(name: str, value, now: float) -> Rejection | None:
    if name in COUNTS:
        return check_count(name, value)
    if name in DURATIONS:
        return check_duration(name, value)
    if name == "kv_transfer_s":
        return check_gap(name, value)
    bad = check_number(name, value)
    if bad is None and not MIN_T0 <= value <= now + MAX_DURATION_S:
        bad = Rejection(R.ABSURD, f"{name}={value} is not epoch seconds between 2000 and now+1d")
    return bad


def validate_phase(event: dict, now: float) -> dict | Rejection:
    """A phase event -> its normalised fields (nulls dropped), or a Rejection."""
    kind = event.get("kind")
    if kind not in SPEC:
        return Rejection(R.BAD_KIND, f"kind={str(kind)[:40]!r}")
    if event.get("schema_version") != PHASE_VERSION or isinstance(event.get("schema_version"), bool):
        return Rejection(R.UNKNOWN_VERSION, f"{kind} events need schema_version 2, "
                                            f"got {event.get('schema_version')!r}")
    required, optional, either = SPEC[kind]
    unknown = sorted(set(event) - set(_COMMON + required + optional + either))
    if unknown:
        return Rejection(R.UNKNOWN_FIELD, f"fields not in the {kind} contract: {', '.join(unknown)[:200]}")
    out = {"kind": kind}
    for name in ("request_id",) + required + optional + either:
        value = event.get(name)
        if value is None:
            if name == "request_id" or name in required:
                return Rejection(R.MISSING_FIELD, f"{name} is required in {kind}")
            continue
        if name in V2_OPTIONAL:
            continue  # checked together below (they constrain each other)
        if name in LABEL_FIELDS:
            bad = check_label(name, value)
        elif name == "status":
            bad = check_status(value)
        else:
            bad = _check_number(name, value, now)
            if bad is None and name not in COUNTS:
                value = float(value)
        if bad is not None:
            return bad
        out[name] = value
    bad = check_across(kind, out)
    if bad is not None:
        return bad
    if kind == "end":
        extras: dict = {}
        bad = check_v2_optional(event, extras) or check_gap_within(extras["max_gap_s"], out.get("e2e_s"))
        if bad is not None:
            return bad
        # nulls dropped as for every phase field; False is carried (it was said)
        out.update((k, v) for k, v in extras.items() if event.get(k) is not None)
    return out


def check_across(kind: str, phase, get=dict.get) -> Rejection | None:
    """Checks across one phase's normalised fields (stall data apart). `get` reads a field: of a dict here, of
    the C decoder's Struct in fast_decode.py and batch_decode.py, which call this same function."""
    either = SPEC[kind][2]
    have = sum(get(phase, name) is not None for name in either)
    if either and have != 1:
        return Rejection(R.MISSING_FIELD if not have else R.INCONSISTENT,
                         f"{kind} needs exactly one of {' or '.join(either)}")
    if kind == "end" and get(phase, "ttft_s") is not None and get(phase, "t_first") is not None:
        return Rejection(R.INCONSISTENT, "end may repeat ttft_s or t_first, not both")
    cached = get(phase, "cached_input_tokens")
    if kind == "start" and cached is not None and cached > get(phase, "input_tokens"):
        return Rejection(R.INCONSISTENT, f"cached_input_tokens={cached} > input_tokens")
    return None
