"""Per-phase regression alerts (prefill / decode) with runbook routing.

The glue between the rules, the store and the pure evaluation: one
`alert_window` query per distinct (window, baseline, percentile) and time
point, shared by every rule that asks the same thing (the default prefill and
decode rules share one query, since it returns both phases).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone

from phasemeter.alerts.evaluate import FIRING, Result, evaluate, order, table
from phasemeter.alerts.replay import evaluation_points, firing_runs
from phasemeter.alerts.rules import RuleSet, load_rules, override
from phasemeter.alerts.transfer import evaluate_transfer

__all__ = ["check", "backtest", "episodes", "demo_check", "load_rules", "override", "Result", "Episode"]


def _ms(epoch_s: float) -> int:
    return int(round(epoch_s * 1000))


def window_params(rule, at: datetime, models) -> dict:
    """Typed params of sql/alert_window.sql for a rule evaluated at `at`."""
    end = at.timestamp()
    start = end - rule.window_s
    spans = rule.baseline.spans(start, end)
    lo = min(s for s, _ in spans)
    utc = timezone.utc
    return {"cur_start": datetime.fromtimestamp(start, utc), "cur_end": datetime.fromtimestamp(end, utc),
            "lo": datetime.fromtimestamp(lo, utc), "base_starts_ms": [_ms(s) for s, _ in spans],
            "base_span_ms": _ms(rule.baseline.duration_s), "q": rule.percentile / 100.0,
            "models": list(models or [])}


def check(runner, ruleset: RuleSet, at: datetime, models=(), buckets=(), bucket_labels=()) -> list[Result]:
    """Evaluate every rule at `at` (window ends there; naive = UTC)."""
    at = at if at.tzinfo else at.replace(tzinfo=timezone.utc)
    frames: dict = {}
    results: list[Result] = []
    for rule in ruleset.rules:
        # The stall and transfer families read their own frames (rows with chunk data, with a transfer).
        query = "transfer_window" if rule.transfer else "stall_window" if rule.rises else "alert_window"
        key = (rule.window_s, rule.baseline, rule.percentile, query)
        if key not in frames:
            frames[key] = runner.df(query, window_params(rule, at, models))
        results += (evaluate_transfer if rule.transfer else evaluate)(rule, frames[key], at, tuple(buckets))
    return order(results, list(bucket_labels), [r.name for r in ruleset.rules])


@dataclass(frozen=True)
class Episode:
    rule: str
    phase: str
    model: str
    bucket: str
    started: datetime          # first evaluation point that fired (rising edge)
    ended: datetime | None     # first point after it that did not fire; None = still firing
    points: int                # evaluation points firing in a row
    worst_change: float        # the deepest drop seen during the episode
    # Seconds of the firing period inside the baseline at the episode's end
    # (its last point when still firing), and their share of the baseline.
    baseline_overlap_s: float = 0.0
    baseline_overlap_share: float = 0.0
    # True when that share is enough to move the rule's percentile: over half
    # of its level (p5: 2.5 % of the baseline) is incident data, so a
    # "resolved" may only mean the baseline absorbed the incident.
    absorbed: bool = False

    def duration_s(self, last: datetime) -> float:
        return ((self.ended or last) - self.started).total_seconds()


def episodes(series: list[tuple[datetime, list[Result]]]) -> list[Episode]:
    """Rising edges and durations from results at successive points. A point
    without data (insufficient) ends an episode: the alert would have resolved."""
    runs = firing_runs(series, lambda r: (r.rule.name, r.model, r.bucket))
    eps = [Episode(rule, rs[0].rule.phase, model, bucket, started, ended, len(rs), min(r.change for r in rs))
           for (rule, model, bucket), started, ended, rs in runs]
    return sorted(eps, key=lambda e: (e.started, e.rule, e.model, e.bucket))


def backtest(runner, ruleset: RuleSet, start: datetime, end: datetime, every_s: float, models=(),
             buckets=(), bucket_labels=()) -> tuple[list[datetime], list[Episode]]:
    """Replay the rules at start, start+every, ... <= end."""
    points = evaluation_points(start, end, every_s)
    series = [(at, check(runner, ruleset, at, models, buckets, bucket_labels)) for at in points]
    rules = {r.name: r for r in ruleset.rules}
    return points, [with_overlap(e, rules[e.rule], points[-1]) for e in episodes(series)]


def with_overlap(ep: Episode, rule, last: datetime) -> Episode:
    """How much of the episode's firing data its baseline held when it ended.

    The firing data is [first firing window's start, end of the episode);
    the baseline is the rule's spans for the window ending then."""
    end = (ep.ended or last).timestamp()
    lo, hi = ep.started.timestamp() - rule.window_s, end
    spans = rule.baseline.spans(end - rule.window_s, end)
    overlap = sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in spans)
    share = overlap / rule.baseline.nominal_s
    return replace(ep, baseline_overlap_s=overlap, baseline_overlap_share=share,
                   absorbed=share >= rule.percentile / 100 / 2)


def demo_check(runner, settings, at: datetime | None = None) -> str:
    """The demo's last step: default rules with a 30 min baseline (the demo has one
    hour of history, too short for the 24h default), evaluated at `at`.

    Without `at`: 6 min before the newest stored row. The synthetic gateway
    regresses at 65% of its hour, i.e. 21 min before its last row, so the 15 min
    window [last-21m, last-6m) is all regressed and the baseline before it is clean.
    """
    from phasemeter.stream_jobs.buckets import labels, parse_edges

    ruleset = override(load_rules(), baseline={"kind": "previous", "duration": "30m"})
    if at is None:
        now = datetime.now(timezone.utc)
        seen = runner.df("summary", {"start": now - timedelta(hours=3), "end": now + timedelta(minutes=5)})
        if seen.empty:
            return "alerts: no generations in the last 3 hours, nothing to evaluate"
        last = seen["last_ts"].max()
        last = last.tz_localize("UTC") if last.tzinfo is None else last
        at = last.to_pydatetime() - timedelta(minutes=6)
    results = check(runner, ruleset, at, bucket_labels=labels(parse_edges(settings.bucket_edges)))
    fired = sum(r.state == FIRING for r in results)
    head = (f"alerts at {at:%Y-%m-%d %H:%M:%S} UTC (window 15m, baseline: previous 30m; "
            f"{fired} firing)")
    text = head + "\n" + table(results)
    if settings.slos:  # the demo's SLOs: their burn-rate rules at the same time
        from phasemeter.alerts import slo_alerts
        from phasemeter.alerts.slo_rules import load_slos

        sloset = load_slos(settings.slos, labels(parse_edges(settings.bucket_edges)))
        burns = slo_alerts.check(runner, sloset, at)
        text += (f"\nSLO burn-rate alerts at the same time ({sum(r.firing for r in burns)} firing):\n"
                 + slo_alerts.table(burns, sloset))
    return text
