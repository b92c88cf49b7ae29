"""Backtests' shared arithmetic, pure: the evaluation points over a range,
and the firing runs (rising edge to the first point that does not fire) of
any alert results at successive points. The per-phase rules
(phasemeter.alerts.backtest) and the SLO burn-rate rules
(slo_alerts.backtest) replay the same way."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from datetime import datetime, timedelta

MAX_POINTS = 2000


def evaluation_points(start: datetime, end: datetime, every_s: float) -> list[datetime]:
    """start, start + every, ... <= end; too many is the flags' error."""
    count = int((end - start).total_seconds() // every_s) + 1
    if count > MAX_POINTS:
        raise ValueError(f"--every {every_s:g}s gives {count} evaluation points over --from..--to; "
                         f"at most {MAX_POINTS}: use a longer --every or a shorter range")
    return [start + timedelta(seconds=i * every_s) for i in range(count)]


def firing_runs(series: list[tuple[datetime, list]], key: Callable[[object], Hashable]
                ) -> list[tuple[Hashable, datetime, datetime | None, list]]:
    """[(key, started, ended, the firing results)] from (point, results) pairs;
    `ended` is the first point after the run that did not fire (None: still
    firing at the last point). A point without data (insufficient) ends a run:
    the alert would have resolved."""
    open_: dict[Hashable, tuple[datetime, list]] = {}
    done: list[tuple] = []
    for at, results in series:
        firing = {key(r): r for r in results if r.firing}
        for k in [k for k in open_ if k not in firing]:
            started, rs = open_.pop(k)
            done.append((k, started, at, rs))
        for k, r in firing.items():
            open_.setdefault(k, (at, []))[1].append(r)
    done += [(k, started, None, rs) for k, (started, rs) in open_.items()]
    return done
