"""Validation and derivation: raw bytes -> row dict, or a Rejection.

Pure (no Kafka, no ClickHouse), so every edge case of docs/metrics.md is a plain unit test.
"""

from __future__ import annotations

import json
import time

from . import reasons as R
from .buckets import Bucketer
from .formulas import NULL, Fields, check_one, metrics
from .contract import COUNTS, DURATIONS, LABEL_FIELDS, MAX_BATCH, MAX_DURATION_S, MIN_T0, SCHEMA_VERSIONS, Rejection
from .contract import V2_OPTIONAL, check_gap_within, check_v2_optional, lone_surrogate, may_hold_lone_surrogate
from .contract import STREAMED, V2_ONLY, check_bool, check_count, check_duration, check_gap, check_label, check_status
from .phase_events import PHASE_KINDS, Phase, validate_phase

REQUIRED = ("schema_version", "kind", "request_id", "model", "t0", "e2e_s", "input_tokens", "output_tokens")
OPTIONAL = ("ttft_s", "queue_s", "cached_input_tokens", "status", "finish_reason", "gateway", "replica")
KNOWN = frozenset(REQUIRED + OPTIONAL)  # a v1 generation: exactly as strict as before v2's extras
KNOWN_V2 = KNOWN | frozenset(V2_OPTIONAL) | frozenset(V2_ONLY)

# The stored columns, in the sink's insert order; schema/0001 defines them, and a test holds the two equal.
ROW_COLUMNS = (
    "ts", "request_id", "model", "input_bucket", "status", "finish_reason", "gateway", "replica",
    "input_tokens", "output_tokens", "cached_input_tokens",
    "queue_s", "ttft_s", "decode_s", "e2e_s",
    "prefill_tps", "prefill_tps_uncached", "decode_tps", "tpot_s",
    "max_gap_s", "stalled", "chunks", "gap_threshold_s", "output_tokens_estimated",  # schema/0010, 0011
    "prefill_replica", "decode_replica", "kv_transfer_s",  # schema/0027
    "streamed",  # schema/0029
    "schema_version", "src_topic", "src_partition", "src_offset",
)


def parse(raw: bytes, max_bytes: int) -> dict | Rejection:
    if raw is None:
        return Rejection(R.MISSING_FIELD, "empty message (no value)")
    if len(raw) > max_bytes:
        return Rejection(R.OVERSIZE, f"{len(raw)} bytes > limit {max_bytes}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Rejection(R.NOT_UTF8, f"invalid UTF-8 at byte {exc.start}")
    try:
        event = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        return Rejection(R.MALFORMED_JSON, str(exc)[:200])
    except ValueError as exc:  # valid JSON, but an integer longer than Python converts (4,300 digits)
        return Rejection(R.ABSURD, f"a number too long to be any field's value: {str(exc)[:120]}")
    if not isinstance(event, dict):
        return Rejection(R.NOT_OBJECT, f"top level is {type(event).__name__}")
    return event


def _nan(value):
    return NULL if value is None else value


def numbers(fields: dict) -> Fields:
    """A row's numbers as formulas.py takes them (null -> NaN)."""
    return Fields(fields["t0"], fields["e2e_s"], _nan(fields["ttft_s"]), _nan(fields["queue_s"]),
                  fields["input_tokens"], fields["output_tokens"], _nan(fields["cached_input_tokens"]),
                  _nan(fields["kv_transfer_s"]), NULL if fields[STREAMED] is None else int(fields[STREAMED]))


def validate(event: dict, now: float | None = None, oldest: float = MIN_T0) -> dict | Rejection:
    """Check types, ranges and orderings; return normalised fields. `oldest`: the earliest t0 the store
    keeps (contract.oldest_kept). The worker's common message takes the C decoder instead (fast_decode.py)."""
    now = time.time() if now is None else now
    if not isinstance(event, dict):
        return Rejection(R.NOT_OBJECT, f"event is {type(event).__name__}, not an object")
    version = event.get("schema_version")
    if isinstance(version, bool) or version not in SCHEMA_VERSIONS:
        return Rejection(R.UNKNOWN_VERSION, f"schema_version={version!r}; supported: {SCHEMA_VERSIONS}")
    if event.get("kind") != "generation":
        return Rejection(R.BAD_KIND, f"kind={str(event.get('kind'))[:40]!r}; expected 'generation', "
                                     f"'batch' or (v2) one of {PHASE_KINDS}")
    unknown = sorted(set(event) - (KNOWN_V2 if version == 2 else KNOWN))
    if unknown:
        extra = " (v2 only)" if version == 1 and set(unknown) <= KNOWN_V2 else ""
        return Rejection(R.UNKNOWN_FIELD, f"fields not in the v{version} contract{extra}: "
                                          f"{', '.join(unknown)[:200]}")
    out: dict = {"schema_version": version}
    for name in LABEL_FIELDS:
        value = event.get(name)
        bad = _missing(name) if value is None else check_label(name, value)
        if bad is not None:
            return bad
        out[name] = "" if value is None else value
    out["status"] = event.get("status", "ok")
    # Each check runs once those before it passed (`or`); `ranged` puts the numbers in `out`.
    bad = check_status(out["status"]) or ranged(event.get, out) or check_bool(STREAMED, event.get(STREAMED))
    if bad is not None:
        return bad
    out[STREAMED] = event.get(STREAMED)  # after the numbers, as rows have always held it; CHECKS read it
    bad = (check_one(numbers(out), now + MAX_DURATION_S, oldest)  # formulas.CHECKS on a batch of one row
           or check_v2_optional(event, out) or check_gap_within(out["max_gap_s"], out["e2e_s"]))
    return bad if bad is not None else out


# The numbers `ranged` checks, in the full path's order: (name, check, whether a float). t0 is epoch seconds,
# held to the clock by formulas.CHECKS; kv_transfer_s a gap (contract.PD_FIELDS) that CHECKS holds inside ttft_s.
# A table: a branch per name in the loop made `ranged` a quarter slower (~0.5 µs an event).
_RANGED = (*((name, check_count, False) for name in COUNTS),
           ("t0", lambda name, value: check_duration(name, value, None), True),
           *((name, check_duration, True) for name in DURATIONS), ("kv_transfer_s", check_gap, True))


def ranged(get, out: dict) -> Rejection | None:
    """The first count, t0, duration or gap (`get(name)`: None when absent or null) outside the contract's
    type or range, in the full path's order; checked values go to `out`, times as floats. It also names a
    Generation formulas.out_of_range refused (columnar.py), whose JSON-typed numbers give the same detail."""
    for name, check, floated in _RANGED:
        value = get(name)
        bad = _missing(name) if value is None else check(name, value)
        if bad is not None:
            return bad
        out[name] = float(value) if floated and value is not None else value
    return None


def _missing(name: str) -> Rejection | None:
    return Rejection(R.MISSING_FIELD, f"{name} is required") if name in REQUIRED else None


def derive(fields: dict, bucket: Bucketer) -> dict:
    """The metrics of docs/metrics.md from validated fields (formulas.metrics on one row); null is never 0 or inf."""
    return {
        **fields,
        "ts": fields["t0"],
        "input_bucket": bucket(fields["input_tokens"]),
        **{name: None if value != value else value for name, value in metrics(numbers(fields)).items()},  # NaN: null
        # null without chunk data: "no stall" is only said of a measured stream
        "stalled": None if fields["gaps_over"] is None else int(fields["gaps_over"] > 0),
        "output_tokens_estimated": int(fields["output_tokens_estimated"]),
        STREAMED: None if fields[STREAMED] is None else int(fields[STREAMED]),
    }


def process(raw: bytes, bucket: Bucketer, max_bytes: int, now: float | None = None,
            oldest: float = MIN_T0) -> dict | Rejection:
    """The whole pure pipeline for one message value holding one generation."""
    event = parse(raw, max_bytes)
    if isinstance(event, Rejection):
        return event
    bad = lone_surrogate(event) if may_hold_lone_surrogate(raw) else None
    if bad is not None:
        return bad
    fields = validate(event, now, oldest)
    return fields if isinstance(fields, Rejection) else derive(fields, bucket)


def process_event(event, bucket: Bucketer, now: float, internal: bool = False,
                  check_text: bool = False, oldest: float = MIN_T0) -> dict | Phase | Rejection:
    """One parsed event (a dict from a message or an envelope) -> row, Phase or Rejection. `check_text`: its
    message may hold a lone surrogate (contract.may_hold_lone_surrogate)."""
    bad = lone_surrogate(event) if check_text else None
    if bad is not None:
        return bad
    kind = event.get("kind") if isinstance(event, dict) else None
    if kind in PHASE_KINDS:
        fields = validate_phase(event, now)
        return fields if isinstance(fields, Rejection) else Phase(fields["request_id"], fields)
    # `internal`: records the join wrote to the joined topic (stream_jobs/join.py)
    if internal and kind == "orphan":
        # The joined topic is an input too: only a reason code of ours is taken, and only text as its detail.
        reason, detail = event.get("reason"), event.get("detail")
        if reason not in R.ALL or not isinstance(detail, str):
            return Rejection(R.BAD_VALUE, "an orphan record without a known reason code and a text detail")
        return Rejection(reason, detail[:300])
    # Only the join may say "abandoned": validate it as a cancellation (no output needed), then restore it.
    abandoned = internal and event.get("status") == "abandoned"
    fields = validate({**event, "status": "cancelled"} if abandoned else event, now, oldest)
    if isinstance(fields, Rejection):
        return fields
    if abandoned:
        fields["status"] = "abandoned"
    return derive(fields, bucket)


def process_message(raw: bytes, bucket: Bucketer, max_bytes: int, now: float | None = None,
                    max_batch: int = MAX_BATCH, internal: bool = False,
                    oldest: float = MIN_T0) -> list[dict | Phase | Rejection]:
    """One Kafka message -> one result per event: a row, a Phase (to be joined) or a Rejection. A message is one
    event or an envelope {"schema_version": 1|2, "kind": "batch", "events": [...]}, amortising Kafka's cost per
    message; each inner event is validated alone, so a bad one does not sink its neighbours (its detail names its
    index). `internal`: only the worker's joined topic. `oldest`: contract.oldest_kept (MIN_T0: no bound)."""
    event = parse(raw, max_bytes)
    if isinstance(event, Rejection):
        return [event]
    now = time.time() if now is None else now
    check = may_hold_lone_surrogate(raw)
    if event.get("kind") != "batch":
        return [process_event(event, bucket, now, internal, check, oldest)]
    version = event.get("schema_version")
    if isinstance(version, bool) or version not in SCHEMA_VERSIONS:
        return [Rejection(R.UNKNOWN_VERSION, f"envelope schema_version={version!r}")]
    inner = event.get("events")
    if not isinstance(inner, list) or not inner:
        return [Rejection(R.WRONG_TYPE, "envelope 'events' must be a non-empty list")]
    if len(inner) > max_batch or set(event) - {"schema_version", "kind", "events"}:
        return [Rejection(R.BAD_VALUE, f"envelope must hold 1..{max_batch} events and nothing else")]
    results = (process_event(item, bucket, now, internal, check, oldest) for item in inner)
    return [r.in_envelope(i) if isinstance(r, Rejection) else r for i, r in enumerate(results)]
