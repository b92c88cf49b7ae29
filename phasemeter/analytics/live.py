"""The live page's data requests: HTTP query strings in, the CLI's JSON out.

`bands(runner, query, edges)` parses `from/to/step/model/bucket/path/abandoned/
prefill` and calls the very `run_query` + `render(..., "json")` that
`phasemeter query bands --format json` calls, so the page and the CLI cannot
disagree: the payload is the CLI's document plus the lists the page's filters
need. Errors come back as (400, {"error", "param"}), the message naming the
query parameter as typed in the URL, not the CLI flag.

`slo(runner, query, sloset, edges)` does the same for `phasemeter slo`: the
SLOs the worker declared, through phasemeter.analytics.slo.attainment and the
CLI's JSON renderer, per step and for the whole window (the row's headline).
`slo_document` is that payload from plain arguments, for `chart --out x.html`.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone

from phasemeter.timeparse import ArgError, parse_time

from phasemeter.analytics.core import _naive, run_query, step_from
from phasemeter.analytics.present import render

PARAMS = ("from", "to", "step", "model", "bucket", "path", "abandoned", "prefill")
_FLAG = re.compile(r"^--(from|to|step|model|bucket|rollup|exact|abandoned|prefill)\b")
_PARAM_OF_FLAG = {"rollup": "path", "exact": "path"}


class BadRequest(ValueError):
    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param


def _many(query, name: str) -> list[str]:
    """?model=a&model=b and ?model=a,b mean the same: a link stays short."""
    values = query.getall(name, []) if hasattr(query, "getall") else query.get(name, [])
    values = [values] if isinstance(values, str) else values
    return [v.strip() for raw in values for v in raw.split(",") if v.strip()]


def _one(query, name: str, default: str) -> str:
    vals = _many(query, name)
    if len(vals) > 1:
        raise BadRequest(name, f"{name}: one value expected, got {', '.join(vals)}")
    return vals[0] if vals else default


def _known(query, params: tuple[str, ...]) -> None:
    unknown = sorted(set(query.keys()) - set(params))
    if unknown:
        raise BadRequest(unknown[0], f"{unknown[0]}: unknown parameter; known: {', '.join(params)}")


def _window(query, now: datetime | None) -> tuple[datetime, datetime]:
    now = now or datetime.now(timezone.utc)
    try:
        start = parse_time(_one(query, "from", "-1h"), "from", now)
        end = parse_time(_one(query, "to", "now"), "to", now)
    except ArgError as exc:
        raise BadRequest(str(exc).split()[0], str(exc)) from None
    if end <= start:
        raise BadRequest("to", f"to {_one(query, 'to', 'now')!r} must be after from {_one(query, 'from', '-1h')!r}")
    return start, end


def _step(step: str, start: datetime, end: datetime) -> int:
    try:
        return step_from(step, start, end)
    except ArgError as exc:
        raise BadRequest("step", str(exc).replace("--step", "step", 1)) from None


def _force(query) -> str | None:
    path = _one(query, "path", "auto")
    if path not in ("auto", "exact", "rollup"):
        raise BadRequest("path", f"path {path!r}: expected auto, exact or rollup")
    return None if path == "auto" else path


def parse(query, now: datetime | None = None) -> dict:
    """The request as run_query's arguments; BadRequest names the parameter."""
    _known(query, PARAMS)
    start, end = _window(query, now)
    step = _one(query, "step", "auto")
    step_s = None if step == "auto" else _step(step, start, end)  # None: run_query picks it by the samples
    force = _force(query)
    return {"start": start, "end": end, "step_s": step_s, "models": _many(query, "model"),
            "buckets": _many(query, "bucket"), "force": force,
            "abandoned": _one(query, "abandoned", "include"), "prefill": _one(query, "prefill", "total")}


def _as_bad_request(exc: ArgError) -> BadRequest:
    """run_query speaks CLI flags (--model ...); the URL has parameters (model=...)."""
    msg = str(exc)
    m = _FLAG.match(msg)
    if not m:
        return BadRequest("request", msg)
    param = _PARAM_OF_FLAG.get(m.group(1), m.group(1))
    return BadRequest(param, param + msg[m.end():] if m.group(1) == param else msg)


def refused(bad: BadRequest) -> tuple[int, dict]:
    """An /api/* endpoint's 400: the message and the parameter it names."""
    return 400, {"error": str(bad), "param": bad.param}


def bands(runner, query, edges: str, now: datetime | None = None) -> tuple[int, dict]:
    """(status, payload). Blocking: the worker runs it in an executor."""
    try:
        req = parse(query, now)
        df, meta = run_query(runner, req["start"], req["end"], req["step_s"], req["models"], req["buckets"],
                             kind="bands", force=req["force"], default_edges=edges,
                             abandoned=req["abandoned"], prefill=req["prefill"])
    except BadRequest as exc:
        return refused(exc)
    except ArgError as exc:
        return refused(_as_bad_request(exc))
    doc = json.loads(render(df, "json", meta))
    present = runner.df("models_in_window", {"start": _naive(req["start"]), "end": _naive(req["end"])})
    models = present["model"] if "model" in present.columns else []  # an empty answer has no columns
    doc.update(bucket_order=meta["bucket_order"], models_in_window=[str(m) for m in models])
    return 200, doc


SLO_PARAMS = ("from", "to", "step", "model", "bucket", "path", "slo", "by")
# What the page's attainment row says instead of being empty (docs/live.md).
NO_SLO = ("no SLO is declared: start the worker with PHASEMETER_SLOS=FILE "
          "(PHASEMETER_SLOS=example for the shipped example; docs/slo.md)")


def parse_slo(query, sloset, now: datetime | None = None) -> dict:
    """/api/slo's parameters: bands' window, step and filters, plus `step=window`
    (the CLI's default), `slo` (only these SLOs) and `by` (cell or model)."""
    _known(query, SLO_PARAMS)
    start, end = _window(query, now)
    step = _one(query, "step", "auto")
    step_s = None if step == "window" else _step(step, start, end)
    force = _force(query)
    by = _one(query, "by", "cell")
    if by not in ("cell", "model"):
        raise BadRequest("by", f"by {by!r}: expected cell (model × input bucket) or model")
    declared = {s.name: s for s in sloset.slos}
    names = _many(query, "slo")
    for name in names:
        if name not in declared:
            have = f"the declared SLOs are {', '.join(declared)}" if declared else NO_SLO
            raise BadRequest("slo", f"slo {name!r}: no such SLO; {have}")
    return {"start": start, "end": end, "step_s": step_s, "models": _many(query, "model"),
            "buckets": _many(query, "bucket"), "force": force, "by": by,
            "slos": [declared[n] for n in dict.fromkeys(names)] or list(sloset.slos)}


def slo_document(runner, slos, start: datetime, end: datetime, step_s: int | None, models=(), buckets=(),
                 bucket_labels=(), force: str | None = None, by: str = "cell") -> dict:
    """{"slos": `phasemeter slo --step S --format json`'s list, "window": the same
    with --step window (the whole window per cell: the row's headline and its
    most-missed objective), "bucket_order", "note" when no SLO is declared}.
    Raises the CLI's ArgError."""
    from phasemeter.render.slo_table import render_many

    from phasemeter.analytics.slo import attainment

    def run(step):
        results = []
        for slo in slos:
            rows, meta = attainment(runner, slo, start, end, step, list(models), list(buckets), list(bucket_labels),
                                    force=force, declared=True, by=by)
            results.append((slo, rows, meta))
        return json.loads(render_many(results, "json"))["slos"]

    stepped = run(step_s)
    doc = {"slos": stepped, "window": stepped if step_s is None else run(None),
           "declared": [s.name for s in slos], "bucket_order": list(bucket_labels)}
    if not slos:
        doc["note"] = NO_SLO
    return doc


def _slo_bad_request(exc: ArgError) -> BadRequest:
    """attainment speaks CLI flags too; "cannot be answered with --rollup" is the path."""
    if "--rollup" in str(exc):
        return BadRequest("path", str(exc))
    return _as_bad_request(exc)


def slo(runner, query, sloset, edges: str, now: datetime | None = None) -> tuple[int, dict]:
    """(status, payload) of /api/slo. Blocking: the worker runs it in an executor.
    sloset: the SLOs the worker declared at start (what slo_minute counts)."""
    from phasemeter.stream_jobs.buckets import labels, parse_edges

    order = labels(parse_edges(edges))
    try:
        req = parse_slo(query, sloset, now)
        doc = slo_document(runner, req["slos"], req["start"], req["end"], req["step_s"], req["models"],
                           req["buckets"], order, force=req["force"], by=req["by"])
    except BadRequest as exc:
        return refused(exc)
    except ArgError as exc:
        return refused(_slo_bad_request(exc))
    return 200, doc


def slo_step(step_s: int) -> int:
    """The attainment row's step beside bands of step_s: whole minutes, at least
    step_s (per 15 s an attainment is a handful of generations, and whole
    minutes let the per-minute counts answer). live.js applies the same rule."""
    return max(60, -(-int(step_s) // 60) * 60)


def chart_slo(args, settings, meta: dict) -> dict | None:
    """The attainment document for `chart --out x.html` over the chart's window
    and filters (meta: the bands' run_query meta); None when no SLO is declared
    (PHASEMETER_SLOS) or the chart re-buckets (the SLO counts know the stored
    buckets only): then the chart has no attainment row."""
    from phasemeter.alerts.slo_rules import load_slos
    from phasemeter.query.runner import open_runner
    from phasemeter.stream_jobs.buckets import labels, parse_edges

    order = labels(parse_edges(settings.bucket_edges))
    sloset = load_slos(settings.slos or None, order)
    if not sloset.slos or meta.get("rebucketed"):
        return None
    start, end = (datetime.fromisoformat(meta[k].replace("Z", "+00:00")) for k in ("start", "end"))
    runner = open_runner(settings, getattr(args, "via", None))
    try:
        return slo_document(runner, sloset.slos, start, end, slo_step(meta["step_s"]),
                            getattr(args, "model", None) or [], getattr(args, "bucket", None) or [], order)
    finally:
        runner.close()
