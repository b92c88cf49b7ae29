"""Parse CLI/HTTP time arguments: ISO timestamps, 'now', '-2h', and steps.

Errors name the flag and the value, because that is what the user typed.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

# How answers write a time (CSV, JSON, HTML charts): ISO 8601 in UTC, the frames' times being naive UTC.
ISO_UTC = "%Y-%m-%dT%H:%M:%SZ"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")


class ArgError(ValueError):
    """A bad user-supplied value; the message names the flag."""


def parse_duration(text: str, flag: str) -> float:
    m = _DURATION.match(text.strip())
    if not m or float(m.group(1)) <= 0:
        raise ArgError(f"{flag} {text!r}: expected a duration like 30s, 1m, 5m, 1h, 1d")
    return float(m.group(1)) * _UNITS[m.group(2)]


def parse_time(text: str, flag: str, now: datetime | None = None) -> datetime:
    """'now', '-15m' (relative to now), or ISO 8601 (naive = UTC)."""
    now = now or datetime.now(timezone.utc)
    raw = text.strip()
    if raw == "now":
        return now
    if raw.startswith("-"):
        return now - timedelta(seconds=parse_duration(raw[1:], flag))
    try:
        value = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise ArgError(f"{flag} {text!r}: expected 'now', a relative time like -1h, "
                       "or an ISO time like 2026-11-29T10:00:00Z") from None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


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
