"""The value of each event field from one span, by otlp_names' attribute
lists: what otlp_map's rules read. Pure. Each returns the value or the
Rejection the worker would give it (the same reason codes)."""

from __future__ import annotations

import json
import re

from phasemeter.stream_jobs import reasons as R
from phasemeter.stream_jobs.contract import (LABEL_FIELDS, MAX_DURATION_S, MIN_T0, Rejection, check_duration,
                                             check_gap, control_character, has_control, lone_surrogate)
from phasemeter.stream_jobs.formulas import check_transfer_within

from .otlp_decode import Span
from .otlp_names import E2E, KV_TRANSFER, QUEUE, REPLICA, REPLICA_SET, REQUEST_ID, REQUEST_N, STREAM, TTFT

_UUID = re.compile(r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}")


def request_id(span: Span) -> str | Rejection:
    name, rid = pick(span.attrs, REQUEST_ID)
    if rid is None:  # no id of its own: the span's is unique too
        name, rid = "trace_id+span_id", span.trace_id + span.span_id
        if not rid:
            return Rejection(R.MISSING_FIELD, f"request_id: none of {', '.join(REQUEST_ID)} "
                                              "and no trace or span id")
    else:
        n = span.attrs.get(REQUEST_N)
        if type(n) is int and n > 1 and type(rid) is str and span.span_id:
            name, rid = f"{name} + span id", f"{rid}-{span.span_id}"
    return label_error(name, rid, LABEL_FIELDS["request_id"]) or rid


def kv_transfer(span: Span, times: dict, half: bool) -> float | None | Rejection:
    """The KV transfer time in seconds, or None. A P/D half's own TTFT does
    not bound it (the prefill instance's one token may come before the
    transfer ends): the joined generation's TTFT does, in the worker."""
    name, value = pick(span.attrs, KV_TRANSFER)
    if value is None:
        return None
    bad = check_gap(name, value) or (None if half else check_transfer_within(value, times["ttft_s"],
                                                                             times["e2e_s"]))
    return bad if bad is not None else float(value)


def timing(span: Span, output_tokens: int, now: float) -> dict | Rejection:
    start, end = span.start_ns, span.end_ns
    if start <= 0:
        return Rejection(R.MISSING_FIELD, "startTimeUnixNano is missing or not a positive integer")
    t0 = start / 1e9
    if not MIN_T0 <= t0 <= now + MAX_DURATION_S:
        return Rejection(R.ABSURD, f"span start {t0} is not epoch seconds between 2000 and now + 1 day")
    if end and end < start:
        return Rejection(R.IMPOSSIBLE_ORDER, f"span ends {(start - end) / 1e9:g} s before it starts")
    e2e_name, e2e = pick(span.attrs, E2E)
    if e2e is None:  # also SGLang before its e2e attribute existed
        if end <= 0:
            return Rejection(R.MISSING_FIELD, f"e2e: no {E2E[0]} and no endTimeUnixNano")
        e2e, e2e_name = (end - start) / 1e9, "span end - start"
    ttft_name, ttft = pick(span.attrs, TTFT)
    queue_name, queue = pick(span.attrs, QUEUE)
    for name, value in ((e2e_name, e2e), (ttft_name, ttft), (queue_name, queue)):
        bad = None if value is None else check_duration(name, value)
        if bad is not None:
            return bad
    if ttft == 0:  # vLLM's value for a request that ended before its first token
        ttft = None
    if ttft is not None and ttft > e2e:
        return Rejection(R.IMPOSSIBLE_ORDER, f"{ttft_name}={ttft} > {e2e_name}={e2e}")
    if queue is not None and queue > (e2e if ttft is None else ttft):
        return Rejection(R.IMPOSSIBLE_ORDER, f"{queue_name}={queue} is after the first token / the end")
    # A call not streamed (STREAM false) has no first token: its event says
    # streamed: false (otlp_map) and the worker stores it with null phases.
    if ttft is None and output_tokens > 0 and span.attrs.get(STREAM) is not False:
        return Rejection(R.MISSING_FIELD, f"time to first token: {output_tokens} output tokens but none of "
                                          f"{', '.join(TTFT)} (or 0.0: no first token)")
    return {"t0": t0, "ttft_s": None if ttft is None else float(ttft), "e2e_s": float(e2e),
            "queue_s": None if queue is None else float(queue)}


def pick(attrs: dict, names: tuple[str, ...]):
    for name in names:
        value = attrs.get(name)
        if value is not None:
            return name, value
    return names[0], None


def label_error(name: str, value, limit: int) -> Rejection | None:
    if type(value) is not str:
        return Rejection(R.WRONG_TYPE, f"{name} must be a string, got {type(value).__name__}")
    if not 0 < len(value) <= limit:
        return Rejection(R.BAD_VALUE, f"{name} must be 1..{limit} characters, got {len(value)}")
    # text the worker could not store (not_utf8), or would dead-letter (control_character)
    return lone_surrogate(value, name) or control_character(name, value)


def _fits(value, limit: int) -> bool:
    """An optional label the worker would store: 1..limit characters of valid,
    printable text."""
    return type(value) is str and 0 < len(value) <= limit and lone_surrogate(value) is None \
        and not has_control(value)


def replica(resource: dict) -> tuple[str | None, bool]:
    """The replica label, and whether a UUID-shaped one was left out. An
    optional label that does not fit the contract is left out, not fatal; a
    UUID-shaped one (a random instance id) is left out and counted, unless the
    site set it as phasemeter.replica."""
    name, value = pick(resource, REPLICA)
    if not _fits(value, LABEL_FIELDS["replica"]):
        return None, False
    if name != REPLICA_SET and _UUID.fullmatch(value):
        return None, True
    return value, False


def finish_reason(value) -> str | None:
    """The first of gen_ai.response.finish_reasons: a string array, or (SGLang)
    that array JSON-encoded in one string."""
    if type(value) is str and value.startswith("["):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            return None
    if type(value) is list:
        value = value[0] if value else None
    return value if _fits(value, LABEL_FIELDS["finish_reason"]) else None
