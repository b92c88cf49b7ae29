"""The raw-vs-rollup decision is a pure function."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from phasemeter.analytics.core import align_minutes, step_from
from phasemeter.analytics.paths import ROLLUP_MIN_ROWS, choose_path
from phasemeter.timeparse import ArgError

H = 3600


def boom():
    raise AssertionError("row estimate asked although it cannot change the answer")


@pytest.mark.parametrize("window_s,step_s,rows,path", [
    (30 * 86400, 60, None, "rollup"),          # long window
    (6 * H + 1, 120, None, "rollup"),
    (6 * H, 60, 1000, "exact"),                # not longer than 6 h, few rows
    (2 * H, 60, ROLLUP_MIN_ROWS + 1, "rollup"),  # short but heavy
    (2 * H, 60, ROLLUP_MIN_ROWS, "exact"),
    (30 * 86400, 30, None, "exact"),           # step finer than the rollup grain
    (30 * 86400, 90, None, "exact"),           # not whole minutes
])
def test_auto(window_s, step_s, rows, path):
    est = boom if rows is None else (lambda: rows)
    assert choose_path(window_s, step_s, estimate_rows=est).path == path


def test_estimate_is_lazy_for_long_windows():
    assert choose_path(7 * H, 60, estimate_rows=boom).path == "rollup"
    assert choose_path(7 * H, 30, estimate_rows=boom).path == "exact"


def test_forced_and_rebucket():
    assert choose_path(30 * 86400, 60, force="exact", estimate_rows=boom).path == "exact"
    assert choose_path(60, 60, force="rollup", estimate_rows=boom).path == "rollup"
    assert choose_path(30 * 86400, 3600, rebucket=True, estimate_rows=boom).path == "exact"
    with pytest.raises(ArgError, match="--buckets"):
        choose_path(30 * 86400, 3600, force="rollup", rebucket=True)
    with pytest.raises(ArgError, match="whole minutes"):
        choose_path(30 * 86400, 30, force="rollup")
    with pytest.raises(ValueError):
        choose_path(60, 60, force="fast")


def test_reason_says_why():
    assert "window" in choose_path(7 * H, 60).reason
    assert "raw rows" in choose_path(H, 60, estimate_rows=lambda: 9_000_000).reason


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
