"""The raw-vs-rollup decision is a pure function."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from phasemeter.analytics.core import align_minutes, step_from
from phasemeter.analytics.paths import choose_path, from_rule
from phasemeter.timeparse import ArgError

H = 3600
LIMITS = {"grain_s": 60, "rollup_window_s": 21600, "rollup_raw_rows": 5_000_000}


def verdict(rule: str, window_s: float = H, step_s: int = 60, raw_rows: int | None = None) -> dict:
    """A row of read_path_view (the rule itself is SQL: tests/integration/test_read_path_rule.py)."""
    return {"rule": rule, "rollup": int(rule in ("window", "rows")), "window_s": window_s, "step_s": step_s,
            "raw_rows": raw_rows, **LIMITS}


def boom():
    raise AssertionError("the store's rule asked although the flags decide")


@pytest.mark.parametrize("rule,path", [("window", "rollup"), ("rows", "rollup"), ("short", "exact"),
                                       ("step", "exact")])
def test_auto_follows_the_stores_rule(rule, path):
    v = verdict(rule, raw_rows=9_000_000 if rule == "rows" else (1000 if rule == "short" else None))
    assert choose_path(H, 60, rule=lambda: v).path == path


def test_the_rule_is_not_asked_when_flags_decide():
    assert choose_path(7 * H, 60, force="exact", rule=boom).path == "exact"
    assert choose_path(60, 60, force="rollup", rule=boom).path == "rollup"
    assert choose_path(30 * 86400, 3600, rebucket=True, rule=boom).path == "exact"
    assert choose_path(30 * 86400, 3600, exact_only={"--prefill engine": "raw"}, rule=boom).path == "exact"


def test_forced_and_rebucket():
    with pytest.raises(ArgError, match="--buckets"):
        choose_path(30 * 86400, 3600, force="rollup", rebucket=True)
    with pytest.raises(ArgError, match="whole minutes"):
        choose_path(30 * 86400, 30, force="rollup")
    with pytest.raises(ValueError):
        choose_path(60, 60, force="fast")
    with pytest.raises(ValueError, match="rule"):
        choose_path(60, 60)


def test_reason_says_why_quoting_the_stores_limits():
    assert from_rule(verdict("window", 7 * H)).reason == "window 7.0 h > 6 h"
    assert from_rule(verdict("rows", H, raw_rows=9_000_000)).reason == "~9,000,000 raw rows > 5,000,000"
    assert from_rule(verdict("short", 2 * H, raw_rows=1234)).reason == "short window (2.0 h), 1,234 raw rows"
    assert from_rule(verdict("step", step_s=90)).reason == \
        "step 90s is finer than / not a multiple of the rollup's 1 min"
    with pytest.raises(ValueError):
        from_rule(verdict("fast"))


def test_align_minutes():
    a = datetime(2026, 1, 1, 10, 0, 30, 500000, tzinfo=timezone.utc)
    b = datetime(2026, 1, 1, 11, 0, 0, tzinfo=timezone.utc)
    lo, hi = align_minutes(a, b)
    assert lo == datetime(2026, 1, 1, 10, 0, tzinfo=timezone.utc) and hi == b
    _, hi = align_minutes(a, b.replace(second=1))
    assert hi == datetime(2026, 1, 1, 11, 1, tzinfo=timezone.utc)


def test_auto_step_gives_200_to_400_points():
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    for span in (H, 6 * H, 86400, 7 * 86400, 30 * 86400):
        step = step_from("auto", t0, datetime.fromtimestamp(t0.timestamp() + span, timezone.utc))
        assert 100 <= span / step <= 400, (span, step)
    assert step_from("5m", t0, t0) == 300
    with pytest.raises(ArgError):
        step_from("1.5s", t0, t0)
