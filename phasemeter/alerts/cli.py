"""`phasemeter alerts check|backtest`: registered by phasemeter.cli.main.

Exit codes of `check` are the contract for cron/CI callers: 0 nothing firing,
1 firing, 2 error (bad flag or rules file, store or worker unreachable,
webhook down). Operational failures are printed as one line, no traceback.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone

from phasemeter.textgrid import grid, printable, printable_lines
from phasemeter.timeparse import parse_duration, parse_time, window

from phasemeter.alerts import backtest, check
from phasemeter.alerts.evaluate import FIRING, as_dict, table
from phasemeter.alerts.rules import load_rules


def _flags(p, common) -> None:
    common(p)
    p.add_argument("--rules", help="rules TOML file (default: the shipped default_rules.toml)")
    p.add_argument("--model", action="append", default=[], help="only this model (repeatable)")
    p.add_argument("--bucket", action="append", default=[], help="only this input bucket (repeatable)")
    p.add_argument("--via", help="ClickHouse HTTP interface to read through (default: the worker's, found from the data dir)")
    p.add_argument("--format", default="table", choices=["table", "json"])
    p.add_argument("--slos", help="SLO file whose burn-rate rules are evaluated too (default: PHASEMETER_SLOS; "
                                  "none declared: per-phase rules only)")


def register(sub, common, window_flags) -> None:
    # window_flags is not used: --step/--from have other meanings here (--at, --every).
    alerts = sub.add_parser("alerts", help="per-phase slow-tail regression alerts (prefill / decode)")
    verbs = alerts.add_subparsers(dest="alerts_command", required=True)
    p = verbs.add_parser("check", help="evaluate every rule now (or --at); exit 0 ok, 1 firing, 2 error")
    _flags(p, common)
    p.add_argument("--at", default="now", help="evaluation time: 'now', ISO, or relative as --at=-2h (default now)")
    p.add_argument("--webhook", help="POST firing alerts here in Alertmanager webhook format")
    p.add_argument("--external-url", default="", help="externalURL / generatorURL in webhook payloads")
    p.set_defaults(func=cmd_check)
    p = verbs.add_parser("backtest", help="replay the rules over history: when would they have fired")
    _flags(p, common)
    p.add_argument("--from", dest="start", default="-24h", help="'now', -24h or ISO (default -24h)")
    p.add_argument("--to", dest="end", default="now", help="default now")
    p.add_argument("--every", default="15m", help="evaluation interval (default 15m)")
    p.set_defaults(func=cmd_backtest)


def _labels(settings) -> list[str]:
    from phasemeter.stream_jobs.buckets import labels, parse_edges

    return labels(parse_edges(settings.bucket_edges))


def _guarded(run):
    """Store/worker/webhook failures -> one line and exit 2 (1 means firing)."""
    def handler(args, settings) -> int:
        try:
            return run(args, settings)
        except RuntimeError as exc:
            print(f"phasemeter alerts {args.alerts_command}: error: {printable(str(exc))}", file=sys.stderr)
            return 2
    return handler


def _slos(settings, args):
    from phasemeter.alerts.slo_rules import load_slos

    return load_slos(args.slos or settings.slos or None, _labels(settings))


def _runner(settings, args):
    from phasemeter.query.runner import open_runner

    return open_runner(settings, args.via)


@_guarded
def cmd_check(args, settings) -> int:
    from phasemeter.alerts.webhook import deliver, safe_url

    from phasemeter.alerts import slo_alerts

    ruleset = load_rules(args.rules, _labels(settings))
    sloset = _slos(settings, args)
    at = parse_time(args.at, "--at").astimezone(timezone.utc)
    runner = _runner(settings, args)
    try:
        results = check(runner, ruleset, at, args.model, args.bucket, _labels(settings))
        burns = slo_alerts.check(runner, sloset, at, args.model)
    finally:
        runner.close()
    firing = [r for r in results if r.state == FIRING]
    burning = [r for r in burns if r.firing]
    if args.format == "json":
        doc = {"at": at.isoformat(), "firing": len(firing) + len(burning),
               "results": [as_dict(r) for r in results]}
        if sloset.slos:
            doc["burn_rate"] = [slo_alerts.as_dict(r, sloset) for r in burns]
        print(json.dumps(doc, indent=2))
    else:
        print(f"# alerts at {at:%Y-%m-%d %H:%M:%S} UTC; throughput slow tail (low percentile); "
              f"{len(firing)} firing")
        print(printable_lines(table(results)))  # its FIRING lines name stored labels
        if sloset.slos:
            print(f"\n# SLO burn-rate alerts (multi-window); {len(burning)} firing")
            print(printable_lines(slo_alerts.table(burns, sloset)))
    if args.webhook and (firing or burning):
        extra = [slo_alerts.webhook_alert(r, sloset, args.external_url) for r in burning]
        sent = deliver(args.webhook, firing, ruleset.runbook_url, args.external_url, extra)
        print(f"webhook: delivered {sent} message(s) to {safe_url(args.webhook)}", file=sys.stderr)
    return 1 if firing or burning else 0


@_guarded
def cmd_backtest(args, settings) -> int:
    from phasemeter.alerts import slo_alerts

    ruleset = load_rules(args.rules, _labels(settings))
    sloset = _slos(settings, args)
    start, end = window(args.start, args.end)
    every_s = parse_duration(args.every, "--every")
    runner = _runner(settings, args)
    try:
        points, eps = backtest(runner, ruleset, start, end, every_s, args.model, args.bucket, _labels(settings))
        _, burn_eps = slo_alerts.backtest(runner, sloset, start, end, every_s, args.model)
    finally:
        runner.close()
    burn_rows = [{"slo": e.slo, "rule": e.rule, "severity": e.severity, "model": e.model, "phase": e.phase,
                  "runbook": sloset.runbook_url(e.phase) if e.phase != "none" else None,
                  "started": e.started.isoformat(), "ended": e.ended.isoformat() if e.ended else None,
                  "duration_s": ((e.ended or points[-1]) - e.started).total_seconds(), "points": e.points,
                  "worst_burn": e.worst_burn} for e in burn_eps]
    last = points[-1]
    rows = [{"rule": e.rule, "phase": e.phase, "model": e.model, "input_bucket": e.bucket,
             "started": e.started.isoformat(), "ended": e.ended.isoformat() if e.ended else None,
             "duration_s": e.duration_s(last), "points": e.points,
             "worst_change_pct": round(100 * e.worst_change, 2),
             "baseline_overlap_s": e.baseline_overlap_s,
             "baseline_overlap_share": round(e.baseline_overlap_share, 4), "baseline_absorbed": e.absorbed}
            for e in eps]
    if args.format == "json":
        doc = {"from": start.isoformat(), "to": end.isoformat(), "every_s": every_s,
               "points": len(points), "episodes": rows}
        if sloset.slos:
            doc["burn_rate_episodes"] = burn_rows
        print(json.dumps(doc, indent=2))
        return 0
    print(f"# backtest {start:%Y-%m-%d %H:%M} .. {end:%Y-%m-%d %H:%M} UTC every {args.every}: "
          f"{len(points)} evaluation points, {len(eps)} firing episode(s)")
    head = ["rule", "model", "bucket", "fired at (UTC)", "resolved at", "duration", "points", "worst"]
    body = [[e.rule, e.model, e.bucket, _t(e.started), _t(e.ended) if e.ended else "still firing",
             f"{e.duration_s(last) / 60:.0f}m", str(e.points), f"{e.worst_change:+.0%}"] for e in eps]
    print("\n".join(grid(head, body, rule=False)))
    if not body:
        print("(no rule would have fired)")
    for e in eps:
        if e.absorbed:
            when = f"resolved at {_t(e.ended)}" if e.ended else f"still firing at {_t(last)}"
            print(f"warning: {e.rule} {printable(e.model)} {printable(e.bucket)} {when} with {e.baseline_overlap_s / 60:.0f}m of its "
                  f"firing period inside the baseline ({e.baseline_overlap_share:.0%} of it): the baseline "
                  "absorbed the incident, so 'resolved' may only mean the comparison degraded; check "
                  "`phasemeter query bands` over the period")
    if sloset.slos:
        _burn_episodes(burn_rows)
    return 0


def _burn_episodes(rows: list[dict]) -> None:
    print(f"\n# SLO burn-rate episodes: {len(rows)}")
    head = ["slo", "rule", "model", "burns", "fired at (UTC)", "resolved at", "duration", "worst burn"]
    body = [[r["slo"], f"{r['rule']} ({r['severity']})", r["model"], r["phase"], r["started"][:16].replace("T", " "),
             r["ended"][:16].replace("T", " ") if r["ended"] else "still firing", f"{r['duration_s'] / 60:.0f}m",
             f"{r['worst_burn']:.1f}×"] for r in rows]
    print("\n".join(grid(head, body, rule=False)))
    if not body:
        print("(no burn-rate rule would have fired)")


def _t(at: datetime) -> str:
    return at.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M")
