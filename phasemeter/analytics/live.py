"""The live page's data requests: HTTP query strings in, the CLI's JSON out.

`bands(runner, query, edges)` parses `from/to/step/model/bucket/path/abandoned/
prefill` and calls the very `run_query` + `render(..., "json")` that
`phasemeter query bands --format json` calls, so the page and the CLI cannot
disagree: the payload is the CLI's document plus the lists the page's filters
need. Errors come back as (400, {"error", "param"}), the message naming the
query parameter as typed in the URL, not the CLI flag.
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


def parse(query, now: datetime | None = None) -> dict:
    """The request as run_query's arguments; BadRequest names the parameter."""
    unknown = sorted(set(query.keys()) - set(PARAMS))
    if unknown:
        raise BadRequest(unknown[0], f"{unknown[0]}: unknown parameter; known: {', '.join(PARAMS)}")
    now = now or datetime.now(timezone.utc)
    try:
        start = parse_time(_one(query, "from", "-1h"), "from", now)
        end = parse_time(_one(query, "to", "now"), "to", now)
    except ArgError as exc:
        raise BadRequest(str(exc).split()[0], str(exc)) from None
    if end <= start:
        raise BadRequest("to", f"to {_one(query, 'to', 'now')!r} must be after from {_one(query, 'from', '-1h')!r}")
    step = _one(query, "step", "auto")
    try:
        step_s = step_from(step, start, end)
    except ArgError as exc:
        raise BadRequest("step", str(exc).replace("--step", "step", 1)) from None
    path = _one(query, "path", "auto")
    if path not in ("auto", "exact", "rollup"):
        raise BadRequest("path", f"path {path!r}: expected auto, exact or rollup")
    return {"start": start, "end": end, "step_s": step_s, "models": _many(query, "model"),
            "buckets": _many(query, "bucket"), "force": None if path == "auto" else path,
            "abandoned": _one(query, "abandoned", "include"), "prefill": _one(query, "prefill", "total")}


def _as_bad_request(exc: ArgError) -> BadRequest:
    """run_query speaks CLI flags (--model ...); the URL has parameters (model=...)."""
    msg = str(exc)
    m = _FLAG.match(msg)
    if not m:
        return BadRequest("request", msg)
    param = _PARAM_OF_FLAG.get(m.group(1), m.group(1))
    return BadRequest(param, param + msg[m.end():] if m.group(1) == param else msg)


def bands(runner, query, edges: str, now: datetime | None = None) -> tuple[int, dict]:
    """(status, payload). Blocking: the worker runs it in an executor."""
    try:
        req = parse(query, now)
        df, meta = run_query(runner, req["start"], req["end"], req["step_s"], req["models"], req["buckets"],
                             kind="bands", force=req["force"], default_edges=edges,
                             abandoned=req["abandoned"], prefill=req["prefill"])
    except BadRequest as exc:
        return 400, {"error": str(exc), "param": exc.param}
    except ArgError as exc:
        bad = _as_bad_request(exc)
        return 400, {"error": str(bad), "param": bad.param}
    doc = json.loads(render(df, "json", meta))
    present = runner.df("models_in_window", {"start": _naive(req["start"]), "end": _naive(req["end"])})
    models = present["model"] if "model" in present.columns else []  # an empty answer has no columns
    doc.update(bucket_order=meta["bucket_order"], models_in_window=[str(m) for m in models])
    return 200, doc
