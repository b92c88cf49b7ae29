"""Render result frames as table, CSV or JSON records, saying which end is slow.

One formatter for every frame (throughput bands, latency): callers pass the
columns and the header lines that say what the numbers mean.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable

import pandas as pd

from .queries import METHOD, PERCENTILES, PHASES

HEADER_NOTE = ("throughput tokens/s; LOW percentiles are the slow tail "
               "(slow p1 = the slowest 1%), high ones the fast side")
_LABELS = ("model", "input_bucket")


def num(value) -> str:
    """Throughputs: thousands separators, two decimals below 100."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"
    return f"{value:,}"


def band_columns() -> list[tuple[str, str]]:
    short = {"p1": "slow p1", "p5": "slow p5", "p50": "median", "p95": "p95", "p99": "p99"}
    cols = [("t", "time (UTC)"), ("model", "model"), ("input_bucket", "bucket"), ("n", "n")]
    for phase in PHASES:
        cols.append((f"{phase}_n", f"{phase} n"))
        cols += [(f"{phase}_{p}", f"{phase} {short[p]}") for p in PERCENTILES]
    return cols


def format_table(df: pd.DataFrame, cols: list[tuple[str, str]], header: list[str],
                 fmt: Callable[[object], str] = num) -> str:
    """`# header` lines, then an aligned table of `cols` (key, title); numbers right-aligned."""
    rows = [[title for _, title in cols]]
    for rec in df.to_dict("records"):
        t = rec["t"]
        rows.append([t.strftime("%Y-%m-%d %H:%M:%S") if hasattr(t, "strftime") else str(t)]
                    + [rec[c] if c in _LABELS else fmt(rec[c]) for c, _ in cols[1:]])
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(cols))]
    lines = [f"# {h}" for h in header]
    for i, r in enumerate(rows):
        lines.append("  ".join(str(v).rjust(w) if i and j >= 3 else str(v).ljust(w)
                               for j, (v, w) in enumerate(zip(r, widths))))
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    if len(rows) == 1:
        lines.append("(no generations in this window)")
    return "\n".join(lines)


def to_table(df: pd.DataFrame, header: list[str] | None = None) -> str:
    """Throughput bands; the default header states the exact method."""
    return format_table(df, band_columns(), header or [HEADER_NOTE, f"method: {METHOD}"])


def to_csv(df: pd.DataFrame) -> str:
    buf = io.StringIO()
    df.to_csv(buf, index=False, date_format="%Y-%m-%dT%H:%M:%SZ")
    return buf.getvalue()


def json_records(df: pd.DataFrame) -> list[dict]:
    """Rows for JSON: NaN becomes null (never 0), times ISO 8601 UTC."""
    records = []
    for rec in df.to_dict("records"):
        rec = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in rec.items()}
        rec["t"] = pd.Timestamp(rec["t"]).strftime("%Y-%m-%dT%H:%M:%SZ")
        records.append(rec)
    return records
