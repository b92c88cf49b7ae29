"""The event contract's limits and labels, and the Rejection every validator returns: the one source of these
values for the worker, the emitter (producers/) and a test holding schema/event-v1.schema.json and
event-v2.schema.json to them. Pure and dependency-free, so the gateway install can import it."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from . import reasons as R

SCHEMA_VERSIONS = (1, 2)  # 2 adds the phase kinds and the optional fields below
MAX_TOKENS = 10_000_000
MAX_DURATION_S = 86_400.0
MIN_T0 = 946_684_800.0  # 2000-01-01: anything earlier is a unit bug (ms? 0?)
MAX_EPOCH_S = 4_102_444_800.0  # 2100-01-01, for static checks (JSON Schema, emitter); the worker's: now + 1 day
STATUSES = ("ok", "error", "cancelled")
COUNTS = ("input_tokens", "output_tokens", "cached_input_tokens")  # check_count
DURATIONS = ("ttft_s", "e2e_s", "queue_s")  # seconds since t0: check_duration
MAX_BATCH = 10_000  # the most events an envelope may hold
LABEL_FIELDS = {"model": 200, "request_id": 128, "finish_reason": 64, "gateway": 200, "replica": 200,
                "prefill_replica": 200, "decode_replica": 200}

# Only on a v2 generation or end (v1: unknown_field): docs/metrics.md, "Decode stalls and estimated output counts".
STALL_FIELDS = ("chunks", "max_gap_s", "gaps_over", "gap_threshold_s")
V2_OPTIONAL = STALL_FIELDS + ("output_tokens_estimated",)
DEFAULT_STALL_THRESHOLD_S = 0.5
# Prefill/decode disaggregated serving, optional on a v2 generation, start and end (docs/phases.md): the
# replicas are labels, kv_transfer_s a gap (check_gap) inside ttft_s, or inside e2e_s without a first token.
PD_LABELS = ("prefill_replica", "decode_replica")
PD_FIELDS = PD_LABELS + ("kv_transfer_s",)
# Optional on a v2 generation: false (not streamed) means no first token to time, so formulas.CHECKS keeps the
# row, with null phases; null says nothing (docs/metrics.md, "Calls not streamed").
STREAMED = "streamed"
V2_ONLY = PD_FIELDS + (STREAMED,)  # only on a v2 generation, beside V2_OPTIONAL


def check_bool(name: str, value) -> Rejection | None:
    """A JSON boolean or null (0/1 and "false" are not one)."""
    if value is not None and type(value) is not bool:
        return Rejection(R.WRONG_TYPE, f"{name} must be a boolean, got {type(value).__name__}")
    return None


# A \u escape of half a surrogate pair ("\ud800") parses to a lone surrogate, which UTF-8 cannot encode: refused
# by name before any code builds stored text from it (Arrow tables, dead letters). Only a message with such an
# escape is walked.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def may_hold_lone_surrogate(raw: bytes) -> bool:
    return b"\\u" in raw and _SURROGATE_ESCAPE.search(raw) is not None


def lone_surrogate(value, path: str = "") -> Rejection | None:
    """not_utf8 naming the first key or string of a parsed event holding a lone surrogate, else None."""
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


# Labels are printed and stored as sent, so none may hold a control character: C0 (NUL..US: ESC, CR, LF,
# TAB...), DEL or C1 (U+0080..U+009F, which some terminals read as escape sequences too).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def has_control(value: str) -> bool:
    """Whether `value` holds a control character. All are unprintable (Cc): a printable string costs one C call."""
    return not value.isprintable() and _CONTROL.search(value) is not None


def may_hold_control(raw: bytes) -> bool:
    """Whether a JSON message can hold a control character in a string. JSON spells C0 only escaped (a
    backslash), DEL raw and C1 as UTF-8 0xC2 0x80..0x9F: without these bytes, no label needs a walk."""
    # memchr finds an int; a one-byte bytes needle cost 5x more (the buffer protocol), ~100 ns per 350-byte scan.
    return 0x5C in raw or 0x7F in raw or 0xC2 in raw  # backslash, DEL, the lead byte of C1


def escape_control(text: str) -> str:
    """`text` with each control character as a \\xNN escape, for text stored from a refused event (a dead
    letter's detail names its fields, and a field name may hold an ESC)."""
    return text if not has_control(text) else _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def control_character(name: str, value) -> Rejection | None:
    """control_character naming the label, or None (a non-string is the type check's to name)."""
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
    # The refused event's index in its envelope (None: a whole message), so that the dead letter keeps that
    # event, not the envelope (stream_jobs/dead_letter.py). Not compared: the detail names it.
    event: int | None = field(default=None, compare=False)

    def in_envelope(self, i: int) -> "Rejection":
        """This rejection of an envelope's event `i`."""
        return Rejection(self.reason, f"events[{i}]: {self.detail}", i)


def oldest_kept(now: float, raw_ttl_days: int) -> float:
    """The earliest t0 kept (PHASEMETER_RAW_TTL_DAYS): the table's TTL would delete an older row as it is written."""
    return now - raw_ttl_days * 86_400.0


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
    """Seconds since t0: negative is an impossible ordering (t_first before t0...), over `max_s` a unit bug.
    `max_s=None` for t0 itself, whose range is checked as epoch seconds."""
    bad = check_number(name, value)
    if bad is None and value < 0:
        bad = Rejection(R.IMPOSSIBLE_ORDER, f"{name}={value} < 0")
    if bad is None and max_s is not None and value > max_s:
        bad = Rejection(R.ABSURD, f"{name}={value} s is longer than a day")
    return bad


def check_gap(name: str, value) -> Rejection | None:
    """A gap or threshold: a difference of two monotonic readings, so a negative one is `negative`, not an ordering."""
    bad = check_duration(name, value)
    return Rejection(R.NEGATIVE, bad.detail) if bad is not None and bad.reason == R.IMPOSSIBLE_ORDER else bad


def check_v2_optional(event: dict, out: dict) -> Rejection | None:
    """The V2_OPTIONAL fields present (null = absent): types, ranges, consistency. All five go into `out`,
    None when absent (output_tokens_estimated False); `check_gap_within` checks max_gap_s once e2e_s is known."""
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
