"""Parse CLI/HTTP time arguments: ISO timestamps, 'now', '-2h', and steps.

Errors name the flag and the value, because that is what the user typed.
Every value is bounded, so no input reaches an overflow further on:

- a time lies in [TIME_MIN, TIME_MAX): after the Unix epoch, and before the
  end of pandas' nanosecond times (2262) and ClickHouse's DateTime64 (2299);
- a duration (a step, a relative time, --every) is at most MAX_DURATION_S,
  100 years, which the queries' `{step_s:UInt32}` holds.
"""

from __future__ import annotations

import argparse
import re
from datetime import datetime, timedelta, timezone

# How answers write a time (CSV, JSON, HTML charts): ISO 8601 in UTC, the frames' times being naive UTC.
ISO_UTC = "%Y-%m-%dT%H:%M:%SZ"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
# ASCII digits only: \d would also take other scripts' digits, which float() reads.
_DURATION = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([smhdw])$")
TIME_MIN = datetime(1970, 1, 1, tzinfo=timezone.utc)
TIME_MAX = datetime(2200, 1, 1, tzinfo=timezone.utc)
MAX_DURATION_S = 36500 * 86400  # 100 years; < 2**32, the queries' UInt32 step


class ArgError(ValueError):
    """A bad user-supplied value; the message names the flag."""


def parse_duration(text: str, flag: str) -> float:
    return _seconds(text.strip(), text, flag)


def _seconds(body: str, text: str, flag: str) -> float:
    """`body` (a duration) in seconds; errors quote `text`, what was typed."""
    m = _DURATION.match(body)
    if not m or float(m.group(1)) <= 0:
        raise ArgError(f"{flag} {text!r}: expected a duration like 30s, 1m, 5m, 1h, 1d")
    seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if not seconds <= MAX_DURATION_S:  # also inf, from hundreds of digits
        raise ArgError(f"{flag} {text!r}: at most {MAX_DURATION_S // 86400}d (100 years)")
    return seconds


def _bounded(value: datetime, text: str, flag: str) -> datetime:
    try:
        inside = TIME_MIN <= value < TIME_MAX  # an offset at year 1 or 9999 overflows here
    except OverflowError:
        inside = False
    if not inside:
        raise ArgError(f"{flag} {text!r}: out of range; times lie from {TIME_MIN:%Y-%m-%d} "
                       f"to before {TIME_MAX:%Y-%m-%d} (UTC)")
    return value


def parse_time(text: str, flag: str, now: datetime | None = None) -> datetime:
    """'now', '-15m' (relative to now), or ISO 8601 (naive = UTC), within [TIME_MIN, TIME_MAX)."""
    now = now or datetime.now(timezone.utc)
    raw = text.strip()
    if raw == "now":
        return _bounded(now, text, flag)
    if raw.startswith("-"):
        return _bounded(now - timedelta(seconds=_seconds(raw[1:], text, flag)), text, flag)
    try:
        value = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise ArgError(f"{flag} {text!r}: expected 'now', a relative time like -1h, "
                       "or an ISO time like 2026-11-29T10:00:00Z") from None
    return _bounded(value if value.tzinfo else value.replace(tzinfo=timezone.utc), text, flag)


def window(start: str, end: str, now: datetime | None = None) -> tuple[datetime, datetime]:
    t0, t1 = parse_time(start, "--from", now), parse_time(end, "--to", now)
    if t1 <= t0:
        raise ArgError(f"--to {end!r} must be after --from {start!r}")
    return t0, t1


# The round steps an automatic step is chosen from, seconds.
STEPS = (1, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 604800)


def auto_step(t0: datetime, t1: datetime, target_points: int = 300) -> int:
    """A round step (seconds) giving ~200-400 points over the window."""
    span = (t1 - t0).total_seconds()
    for step in STEPS:
        if span / step <= target_points:
            return step
    return STEPS[-1]


def number(kind: type, lo: float, hi: float):
    """An argparse `type=`: an int or float from `lo` to `hi` (finite: nan and
    inf are out of range); argparse names the flag and exits 2."""
    def parse(text: str):
        try:
            value = kind(text)
        except (ValueError, OverflowError):
            value = None
        if value is None or not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{text!r}: expected a number from {lo:g} to {hi:g}")
        return value

    parse.__name__ = kind.__name__
    return parse

