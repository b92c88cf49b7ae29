"""Render band results as table, CSV or JSON, saying which end is slow."""

from __future__ import annotations

import io
import json
import math

import pandas as pd

from .queries import LEGEND, METHOD, PERCENTILES, PHASES

HEADER_NOTE = ("throughput tokens/s; LOW percentiles are the slow tail "
               "(slow p1 = the slowest 1%), high ones the fast side")


def _num(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"
    return f"{value:,}"


def to_table(df: pd.DataFrame) -> str:
    short = {"p1": "slow p1", "p5": "slow p5", "p50": "median", "p95": "p95", "p99": "p99"}
    cols = [("t", "time (UTC)"), ("model", "model"), ("input_bucket", "bucket"), ("n", "n")]
    for phase in PHASES:
        cols.append((f"{phase}_n", f"{phase} n"))
        cols += [(f"{phase}_{p}", f"{phase} {short[p]}") for p in PERCENTILES]
    rows = [[h for _, h in cols]]
    for rec in df.to_dict("records"):
        t = rec["t"]
        rows.append([t.strftime("%Y-%m-%d %H:%M:%S") if hasattr(t, "strftime") else str(t)]
                    + [rec[c] if c in ("model", "input_bucket") else _num(rec[c]) for c, _ in cols[1:]])
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(cols))]
    lines = [f"# {HEADER_NOTE}", f"# method: {METHOD}"]
    for i, r in enumerate(rows):
        lines.append("  ".join(str(v).rjust(w) if i and j >= 3 else str(v).ljust(w)
                               for j, (v, w) in enumerate(zip(r, widths))))
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    if len(rows) == 1:
        lines.append("(no generations in this window)")
    return "\n".join(lines)


def to_csv(df: pd.DataFrame) -> str:
    buf = io.StringIO()
    df.to_csv(buf, index=False, date_format="%Y-%m-%dT%H:%M:%SZ")
    return buf.getvalue()


def to_json(df: pd.DataFrame, step_s: int) -> str:
    records = []
    for rec in df.to_dict("records"):
        rec = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in rec.items()}
        rec["t"] = pd.Timestamp(rec["t"]).strftime("%Y-%m-%dT%H:%M:%SZ")
        records.append(rec)
    return json.dumps({"method": METHOD, "legend": LEGEND, "note": HEADER_NOTE,
                       "step_s": step_s, "rows": records}, indent=1, default=str)


def render(df: pd.DataFrame, fmt: str, step_s: int) -> str:
    if fmt == "json":
        return to_json(df, step_s)
    return to_csv(df) if fmt == "csv" else to_table(df)
