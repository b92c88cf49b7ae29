"""Limits and labels of the event contract, shared by both protocols, and the
Rejection every validator returns: the one source of these values. The worker
(derive.py, phase_events.py) validates with them, the emitter
(producers/checks.py, optional.py, phases.py) checks its arguments with them, and a
test holds schema/event-v1.schema.json and event-v2.schema.json to them.
Pure and dependency-free, so the gateway install can import it."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from . import reasons as R

SCHEMA_VERSIONS = (1, 2)  # 2 adds the phase kinds and the optional fields below
MAX_TOKENS = 10_000_000
MAX_DURATION_S = 86_400.0
MIN_T0 = 946_684_800.0  # 2000-01-01: anything earlier is a unit bug (ms? 0?)
# The latest epoch a static check can state (the JSON Schema, the emitter):
# 2100-01-01. The worker's own bound is tighter: now + 1 day.
MAX_EPOCH_S = 4_102_444_800.0
STATUSES = ("ok", "error", "cancelled")
COUNTS = ("input_tokens", "output_tokens", "cached_input_tokens")  # check_count
DURATIONS = ("ttft_s", "e2e_s", "queue_s")  # seconds since t0: check_duration
# The most events one envelope may hold (the worker's decoders).
MAX_BATCH = 10_000
LABEL_FIELDS = {"model": 200, "request_id": 128, "finish_reason": 64, "gateway": 200, "replica": 200,
                "prefill_replica": 200, "decode_replica": 200}

# Optional fields of a v2 `generation` and a v2 `end` phase only (a v1 event
# carrying one is an unknown_field): docs/metrics.md, "Decode stalls and
# estimated output counts".
STALL_FIELDS = ("chunks", "max_gap_s", "gaps_over", "gap_threshold_s")
V2_OPTIONAL = STALL_FIELDS + ("output_tokens_estimated",)
DEFAULT_STALL_THRESHOLD_S = 0.5
# Prefill/decode disaggregated serving, optional on a v2 generation and on the
# start and end phases (docs/phases.md): the replicas are labels of
# LABEL_FIELDS, kv_transfer_s a gap (check_gap: a difference of two readings)
# that lies inside ttft_s, or inside e2e_s when there was no first token.
PD_LABELS = ("prefill_replica", "decode_replica")
PD_FIELDS = PD_LABELS + ("kv_transfer_s",)
PD_ABSENT = {"prefill_replica": "", "decode_replica": "", "kv_transfer_s": None}
# Optional on a v2 generation: false says the call was not streamed, so it
# has no first token to time, and its row is stored with null phases
# (formulas.CHECKS lets it through); null says nothing (docs/metrics.md,
# "Calls not streamed").
STREAMED = "streamed"
# The fields only a v2 generation may carry beside V2_OPTIONAL.
V2_ONLY = PD_FIELDS + (STREAMED,)


def check_streamed(value) -> Rejection | None:
    return check_bool(STREAMED, value)


def check_bool(name: str, value) -> Rejection | None:
    """A JSON boolean or null (0/1 and "false" are not one)."""
    if value is not None and type(value) is not bool:
        return Rejection(R.WRONG_TYPE, f"{name} must be a boolean, got {type(value).__name__}")
    return None


# JSON may spell a character as a \u escape. One that is half of a
# surrogate pair with no other half ("\ud800") parses to a lone surrogate:
# a Python str that no UTF-8 encoder accepts. Stored text must be UTF-8, so
# such an event is refused here, by name, before any code builds text from
# it (the sink's Arrow tables, a dead letter's detail). Only a message that
# holds such an escape at all is walked.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def may_hold_lone_surrogate(raw: bytes) -> bool:
    return b"\\u" in raw and _SURROGATE_ESCAPE.search(raw) is not None


def lone_surrogate(value, path: str = "") -> Rejection | None:
    """not_utf8 naming the first key or string of `value` (a parsed event)
    that holds a lone surrogate; None when all its text is valid Unicode."""
    if isinstance(value, str):
        if value.isascii():
            return None
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return Rejection(R.NOT_UTF8, f"{path or 'a string'} holds a lone surrogate (U+{ord(value[exc.start]):04X}, "
                                         "half of a \\u escape pair); text must be valid Unicode")
        return None
    if isinstance(value, dict):
        found = (lone_surrogate(key, f"a field name in {path or 'the event'}")
                 or lone_surrogate(item, f"{path}.{key}" if path else str(key)) for key, item in value.items())
    elif isinstance(value, list):
        found = (lone_surrogate(item, f"{path}[{i}]") for i, item in enumerate(value))
    else:
        return None
    return next((bad for bad in found if bad is not None), None)


# Labels are printed by text outputs and stored as sent, so a label may not
# hold a control character: C0 (NUL..US: ESC, CR, LF, TAB, ...), DEL, or C1
# (U+0080..U+009F, which some terminals read as escape sequences too).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def has_control(value: str) -> bool:
    """Whether `value` holds a control character. Every one is unprintable
    (category Cc), so a printable string is clean at the cost of one C call."""
    return not value.isprintable() and _CONTROL.search(value) is not None


def may_hold_control(raw: bytes) -> bool:
    """Whether a JSON message can hold a control character in a string. JSON
    spells C0 only as an escape (a backslash), DEL raw, and C1 as UTF-8
    0xC2 0x80..0x9F: a message with none of these three bytes needs no
    walk of its labels (the decoders' common case)."""
    # An int is looked up with memchr; a one-byte bytes needle cost 5x more
    # (the buffer protocol), measured at ~100 ns per scan of a 350-byte event.
    return 0x5C in raw or 0x7F in raw or 0xC2 in raw  # backslash, DEL, the lead byte of C1


def escape_control(text: str) -> str:
    """`text` with each control character written as a \\xNN escape: for
    text we store from a refused event (a dead letter's detail names its
    fields, and a field name may hold an ESC)."""
    return text if not has_control(text) else _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def control_character(name: str, value) -> Rejection | None:
    """control_character naming the label, or None (a non-string is the
    type check's to name)."""
    if isinstance(value, str) and has_control(value):
        return Rejection(R.CONTROL_CHARACTER, f"{name} holds a control character (U+"
                                              f"{ord(_CONTROL.search(value).group()):04X}); labels are printable text")
    return None


def check_label(name: str, value) -> Rejection | None:
    """A label of LABEL_FIELDS: a string of 1 to its limit printable characters."""
    if not isinstance(value, str):
        return Rejection(R.WRONG_TYPE, f"{name} must be a string, got {type(value).__name__}")
    if not value or len(value) > LABEL_FIELDS[name]:
        return Rejection(R.BAD_VALUE, f"{name} must be 1..{LABEL_FIELDS[name]} characters")
    return control_character(name, value)


def check_status(value) -> Rejection | None:
    """`status`: one of STATUSES."""
    if value not in STATUSES:
        return Rejection(R.BAD_VALUE, f"status={str(value)[:40]!r}; expected one of {STATUSES}")
    return None


@dataclass(frozen=True)
class Rejection:
    reason: str   # one of reasons.ALL
    detail: str   # human text naming the field; never the whole payload
    # The refused event's place in its envelope's `events`, None for a whole
    # message: the dead letter keeps that event, not the envelope
    # (stream_jobs/dead_letter.py). Not part of equality: the detail names it.
    event: int | None = field(default=None, compare=False)

    def in_envelope(self, i: int) -> "Rejection":
        """This rejection of an envelope's event `i`."""
        return Rejection(self.reason, f"events[{i}]: {self.detail}", i)


def oldest_kept(now: float, raw_ttl_days: int) -> float:
    """The earliest t0 the store keeps a raw row of (PHASEMETER_RAW_TTL_DAYS):
    an older one would be deleted by the table's TTL as it is written."""
    return now - raw_ttl_days * 86_400.0


def outside_retention(t0: float, oldest: float) -> Rejection | None:
    """outside_retention for a t0 the store would not keep. The fast paths
    take such an event to the full path (t0 >= oldest), which names it."""
    if t0 < oldest:
        return Rejection(R.OUTSIDE_RETENTION, f"t0={t0} is older than the raw retention "
                                              f"(PHASEMETER_RAW_TTL_DAYS, before {oldest:.0f}): the store "
                                              "would delete it unseen")
    return None


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


def check_gap(name: str, value) -> Rejection | None:
    """A gap or threshold in seconds: a difference of two monotonic readings
    (not a time since t0), so a negative one is `negative`, not an ordering."""
    bad = check_duration(name, value)
    return Rejection(R.NEGATIVE, bad.detail) if bad is not None and bad.reason == R.IMPOSSIBLE_ORDER else bad


def check_v2_optional(event: dict, out: dict) -> Rejection | None:
    """Type/range check of the V2_OPTIONAL fields present (null = absent) and
    their consistency with each other; normalised values go into `out`
    (all five keys: None when absent, output_tokens_estimated False). The
    check against e2e_s is `check_gap_within`, run once e2e_s is known."""
    for name in V2_OPTIONAL:
        value = event.get(name)
        if value is None:
            out[name] = False if name == "output_tokens_estimated" else None
            continue
        if name == "output_tokens_estimated":
            bad = check_bool(name, value)
        elif name in ("chunks", "gaps_over"):
            bad = check_count(name, value)
        else:
            bad = check_gap(name, value)
        if bad is not None:
            return bad
        out[name] = float(value) if name in ("max_gap_s", "gap_threshold_s") else value
    chunks, gaps_over = out["chunks"], out["gaps_over"]
    if chunks is None and (gaps_over is not None or out["max_gap_s"] is not None):
        return Rejection(R.INCONSISTENT, "max_gap_s/gaps_over need chunks (the count they were measured over)")
    if gaps_over is not None and out["gap_threshold_s"] is None:
        return Rejection(R.INCONSISTENT, "gaps_over needs gap_threshold_s (what 'over' meant)")
    if gaps_over is not None and gaps_over > chunks:
        return Rejection(R.INCONSISTENT, f"gaps_over={gaps_over} > chunks={chunks}")
    return None


def check_gap_within(max_gap_s: float | None, e2e_s: float | None) -> Rejection | None:
    """A gap between chunks lies inside the generation."""
    if max_gap_s is not None and e2e_s is not None and max_gap_s > e2e_s:
        return Rejection(R.INCONSISTENT, f"max_gap_s={max_gap_s} > e2e_s={e2e_s}")
    return None
