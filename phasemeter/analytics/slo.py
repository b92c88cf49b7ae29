"""SLO attainment per model × input bucket × step (`phasemeter slo`, the
live page's attainment row, /api/slo): counts from sql/slo_exact.sql or
sql/slo_rollup.sql, arithmetic from alerts/burn.py.

Which path: the per-minute counts (slo_minute) exist only for SLOs the
worker declared, from the first whole minute after it registered them, and
only for their declared thresholds. So the rollup answers a window when the
SLO is declared, registered before the window and the step is whole
minutes; then the usual choice applies (long window or many rows). Ad-hoc
thresholds (`--objective`) and earlier windows take the exact path, which
gives the same counts (tested equal).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

from phasemeter.alerts import burn
from phasemeter.alerts.slo_rules import SLO_COUNTS, Slo, parse_objectives
from phasemeter.timeparse import ArgError

from phasemeter.analytics.core import _naive, _utc, align_minutes, check_filters, read_path
from phasemeter.analytics.paths import choose_path

WINDOW_STEP_S = 86_400  # "one row for the whole window": counted per day, then summed (counts add)
METHOD = ("exact counts: a generation meets the SLO when it meets every objective (latency <= limit, "
          "throughput >= limit); failed generations (error, abandoned) are misses unless count_failed = false; "
          "attainment = met / n, burn rate = (1 - attainment) / (1 - target), budget_left = 1 - burn rate")


def with_objectives(slo: Slo, overrides: list[str]) -> Slo:
    """`--objective ttft_s=1.5` (repeatable): ad-hoc thresholds on top of the SLO's."""
    table = dict(slo.objectives)
    for text in overrides:
        metric, sep, value = text.partition("=")
        if not sep:
            raise ArgError(f"--objective {text!r}: expected METRIC=LIMIT, e.g. ttft_s=1.5")
        try:
            table[metric.strip()] = float(value)
        except ValueError:
            raise ArgError(f"--objective {text!r}: {value!r} is not a number") from None
    try:
        return replace(slo, objectives=parse_objectives(table, "--objective"))
    except ValueError as exc:
        raise ArgError(str(exc)) from None


def _registered(runner) -> dict[int, datetime]:
    """slo_id -> the first minute its per-minute counts are complete from (the
    store's rule, schema/0026: slo_view decides alike for Grafana)."""
    rows = runner.rows("slo_registered", {})
    return {int(slo_id): _utc(at) for slo_id, at in zip(rows.column("slo_id"), rows.column("covered_from"))} \
        if len(rows) else {}


def exact_reason(slo: Slo, declared: bool, covered: datetime | None, start: datetime) -> dict[str, str]:
    """Why the rollup cannot answer (empty: it can)."""
    if not declared:
        return {"--objective": "ad-hoc thresholds have no per-minute counts"}
    if covered is None:
        return {f"SLO {slo.name!r}": "it is not counted per minute (the worker was not started with it: "
                                     "PHASEMETER_SLOS)"}
    if covered > start:
        return {f"SLO {slo.name!r}": f"it is counted per minute from {covered:%Y-%m-%d %H:%M} UTC, after --from"}
    return {}


def attainment(runner, slo: Slo, start: datetime, end: datetime, step_s: int | None, models=(), buckets=(),
               bucket_labels=(), force: str | None = None, declared: bool = True, by: str = "cell"):
    """Rows of counts and derived values, and meta. step_s None: one row per
    cell for the whole window. by: cell (model × bucket) or model."""
    start, end = _utc(start), _utc(end)
    if end <= start:
        raise ArgError("--to must be after --from")
    check_filters(list(models), list(buckets), list(bucket_labels))
    q_step = WINDOW_STEP_S if step_s is None else int(step_s)
    covered = _registered(runner).get(slo.slo_id) if declared else None
    lo, _ = align_minutes(start, end)
    exact_only = exact_reason(slo, declared, covered, lo)

    filters = {"models": list(models), "buckets": list(buckets)}
    choice = choose_path((end - start).total_seconds(), q_step, force=force, exact_only=exact_only,
                         rule=lambda: read_path(runner, start, end, q_step, filters))
    q_start, q_end = align_minutes(start, end) if choice.path == "rollup" else (start, end)
    params = {"start": _naive(q_start), "end": _naive(q_end), "step_s": q_step, "models": list(models),
              "buckets": list(buckets)}
    if choice.path == "rollup":
        got = runner.rows("slo_rollup", {**params, "slo_id": slo.slo_id})
    else:
        got = runner.rows("slo_exact", {**params, **slo.params()})
    cells: dict[tuple, dict] = {}
    # An empty answer may come without columns.
    for t, model, bucket, counts in (zip(*map(got.column, ("t", "model", "input_bucket", "counts")))
                                     if len(got) else ()):
        t = q_start if step_s is None else _utc(t)
        key = (t, model, bucket if by == "cell" else "all")
        cells[key] = burn.add(cells.get(key, {}), burn.unpack(counts))
    rank = {b: i for i, b in enumerate(bucket_labels)}
    rows = []
    for (t, model, bucket), c in sorted(cells.items(), key=lambda kv: (kv[0][1], rank.get(kv[0][2], -1), kv[0][0])):
        if not c["n"]:  # in scope, but every generation left out (failed, count_failed = false)
            continue
        t_end = q_end if step_s is None else min(q_end, datetime.fromtimestamp(t.timestamp() + q_step, timezone.utc))
        span = (t_end - max(t, q_start)).total_seconds()
        rows.append({"t": t, "model": model, "input_bucket": bucket, **c, **burn.row(slo, c, span)})
    meta = {"slo": slo.name, "objectives": slo.describe(), "target": slo.target, "slo_id": slo.slo_id,
            "path": choice.path, "reason": choice.reason, "method": METHOD,
            "step_s": None if step_s is None else int(step_s), "by": by,
            "start": q_start.isoformat().replace("+00:00", "Z"), "end": q_end.isoformat().replace("+00:00", "Z"),
            "counted_per_minute_from": None if covered is None else covered.isoformat().replace("+00:00", "Z"),
            "count_failed": slo.count_failed, "counts": list(SLO_COUNTS)}
    return rows, meta


def period_meta(runner, slo: Slo, period_s: float, end: datetime, models=(), bucket_labels=()) -> dict:
    """`phasemeter slo --budget`: per model, the error budget left over the SLO
    period ending at `end` (the SLO file's `period`, default 30 days), i.e.
    1 - the burn rate over it."""
    rows, meta = attainment(runner, slo, _utc(end) - timedelta(seconds=period_s), end, None, models, (),
                            bucket_labels, by="model")
    return {"seconds": period_s, "start": meta["start"], "end": meta["end"], "path": meta["path"],
            "models": [{k: r[k] for k in ("model", "n", "attainment", "burn_rate", "budget_left")} for r in rows]}
