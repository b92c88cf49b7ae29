"""Burn-rate alerts of the declared SLOs: the glue between the SLO file, the
store (sql/slo_windows.sql) and the pure evaluation (alerts/burn.py).

One query per SLO and evaluation point gives every window of every
burn-rate rule at once: each generation is judged once and counted in the
smallest window holding it. Evaluated per model over the SLO's buckets:
the budget belongs to the SLO, and a model is what an operator can act on.
Always the exact path: the windows end at any second, not on minutes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from phasemeter.alerts.burn import BurnResult, evaluate, unpack, windows_from_rings
from phasemeter.alerts.replay import evaluation_points, firing_runs
from phasemeter.alerts.rules import _human
from phasemeter.alerts.slo_rules import SloSet
from phasemeter.textgrid import grid



def _naive(t: datetime) -> datetime:
    return t.astimezone(timezone.utc).replace(tzinfo=None)


def check(runner, sloset: SloSet, at: datetime, models=()) -> list[BurnResult]:
    at = at if at.tzinfo else at.replace(tzinfo=timezone.utc)
    windows = sorted({int(w) for r in sloset.burn for w in (r.long_s, r.short_s)})
    results: list[BurnResult] = []
    if not windows:
        return results
    for slo in sloset.slos:
        got = runner.rows("slo_windows", {"at": _naive(at), "windows_s": windows, "models": list(models),
                                          **slo.params()})
        rings: dict[str, dict[int, dict]] = {}
        for model, ring, counts in (zip(*map(got.column, ("model", "ring", "counts"))) if len(got) else ()):
            rings.setdefault(model, {})[int(ring)] = unpack(counts)
        for model in sorted(rings):
            wins = windows_from_rings(rings[model], windows)
            for rule in sloset.burn:
                results.append(evaluate(slo, rule, model, at, wins[int(rule.long_s)], wins[int(rule.short_s)]))
    return results


@dataclass(frozen=True)
class BurnEpisode:
    slo: str
    rule: str
    severity: str
    model: str
    phase: str                 # of the first firing point (the runbook paged)
    started: datetime
    ended: datetime | None     # None: still firing at the last point
    points: int
    worst_burn: float          # the highest long-window burn rate seen


def backtest(runner, sloset: SloSet, start: datetime, end: datetime, every_s: float,
             models=()) -> tuple[list[datetime], list[BurnEpisode]]:
    points = evaluation_points(start, end, every_s)
    series = [(at, check(runner, sloset, at, models)) for at in points]
    done = [BurnEpisode(slo, rule, rs[0].rule.severity, model, rs[0].phase, started, ended, len(rs),
                        max(r.burn_long for r in rs))
            for (slo, rule, model), started, ended, rs in firing_runs(series, lambda r: (r.slo.name, r.rule.name,
                                                                                         r.model))]
    return points, sorted(done, key=lambda e: (e.started, e.slo, e.rule, e.model))


def as_dict(r: BurnResult, sloset: SloSet) -> dict:
    return {"slo": r.slo.name, "rule": r.rule.name, "severity": r.rule.severity, "model": r.model,
            "at": r.at.isoformat(), "state": r.state, "objectives": r.slo.describe(),
            "burn_long": r.burn_long, "burn_short": r.burn_short, "factor": r.rule.factor,
            "long_s": r.rule.long_s, "short_s": r.rule.short_s, "n_long": r.n_long, "n_short": r.n_short,
            "phase": r.phase, "objective": r.objective, "evidence": r.evidence(),
            "runbook": sloset.runbook_url(r.phase) if r.phase in ("prefill", "decode", "errors") else None}


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}×"


def table(results: list[BurnResult], sloset: SloSet) -> str:
    head = ["slo", "rule", "model", "burn long", "burn short", "factor", "n long", "n short", "state"]
    rows = [[r.slo.name, f"{r.rule.name} ({r.rule.severity})", r.model, _f(r.burn_long), _f(r.burn_short),
             f"{r.rule.factor:g}×", str(r.n_long), str(r.n_short), r.state.upper() if r.firing else r.state]
            for r in results]
    lines = grid(head, rows, right={3, 4, 5, 6, 7})
    if not rows:
        lines.append("(no generations of any SLO in the evaluated windows)")
    for r in results:
        if r.firing:
            lines.append(f"FIRING {r.rule.severity} {r.slo.name}/{r.rule.name} {r.model}: burn "
                         f"{r.burn_long:.1f}× over {_human(r.rule.long_s)} and {r.burn_short:.1f}× over "
                         f"{_human(r.rule.short_s)} (fires at {r.rule.factor:g}× over both; SLO {r.slo.describe()}); "
                         "budget burnt by "
                         f"{r.phase}" + (f" ({r.objective})" if r.objective else "") + f": {r.evidence()}; "
                         f"runbook: {sloset.runbook_url(r.phase) if r.phase != 'none' else '-'}")
    return "\n".join(lines)


ALERT_NAMES = {"prefill": "PhasemeterSloBurnPrefill", "decode": "PhasemeterSloBurnDecode",
               "errors": "PhasemeterSloBurnErrors", "none": "PhasemeterSloBurn"}


def webhook_alert(r: BurnResult, sloset: SloSet, generator_url: str = "") -> dict:
    """One firing burn-rate alert for the Alertmanager webhook: named by the
    phase that burns the budget, so a prefill burn never reaches the decode route."""
    from phasemeter.alerts.webhook import fingerprinted

    labels = {"alertname": ALERT_NAMES[r.phase], "phase": r.phase, "model": r.model, "slo": r.slo.name,
              "rule": r.rule.name, "severity": r.rule.severity}
    annotations = {"summary": f"SLO {r.slo.name} of {r.model} burns its error budget {r.burn_long:.1f}× "
                              f"({r.rule.describe()}), mostly {r.phase}",
                   "description": f"SLO {r.slo.describe()}; {r.evidence()}",
                   "runbook_url": sloset.runbook_url(r.phase) if r.phase != "none" else ""}
    return fingerprinted(labels, annotations, r.at, generator_url)
