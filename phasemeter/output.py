"""Render result frames as table, CSV or JSON records, saying which end is slow.

One formatter for every frame (throughput bands, latency): callers pass the
columns and the header lines that say what the numbers mean. Unknown values
(NaN, NULL/pd.NA) print as "-" and become JSON null, never 0.
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
# Abandoned generations per row, when the frame has them (phasemeter.analytics).
ABANDONED_TITLES = (("abandoned", "abandoned"), ("abandoned_prefill", "ab. in prefill"),
                    ("abandoned_decode", "ab. in decode"))


def _missing(value) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def num(value) -> str:
    """Throughputs: thousands separators, two decimals below 100."""
    if _missing(value):
        return "-"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"
    return f"{value:,}"


def abandoned_columns(df: pd.DataFrame) -> list[tuple[str, str]]:
    return [(c, title) for c, title in ABANDONED_TITLES if c in df.columns]


def band_columns(df: pd.DataFrame | None = None, prefill_label: str = "prefill") -> list[tuple[str, str]]:
    """Throughput columns; the abandoned counts (after n) when `df` has them.
    `prefill_label` names the prefill variant shown, e.g. "prefill (engine)"."""
    short = {"p1": "slow p1", "p5": "slow p5", "p50": "median", "p95": "p95", "p99": "p99"}
    cols = [("t", "time (UTC)"), ("model", "model"), ("input_bucket", "bucket"), ("n", "n")]
    cols += abandoned_columns(df) if df is not None else []
    for phase in PHASES:
        label = prefill_label if phase == "prefill" else phase
        cols.append((f"{phase}_n", f"{label} n"))
        cols += [(f"{phase}_{p}", f"{label} {short[p]}") for p in PERCENTILES]
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


def to_table(df: pd.DataFrame, header: list[str] | None = None, prefill_label: str = "prefill") -> str:
    """Throughput bands; the default header states the exact method."""
    return format_table(df, band_columns(df, prefill_label), header or [HEADER_NOTE, f"method: {METHOD}"])


def to_csv(df: pd.DataFrame) -> str:
    buf = io.StringIO()
    df.to_csv(buf, index=False, date_format="%Y-%m-%dT%H:%M:%SZ")
    return buf.getvalue()


def json_records(df: pd.DataFrame) -> list[dict]:
    """Rows for JSON: NaN/NULL become null (never 0), numbers plain, times ISO 8601 UTC."""
    records = []
    for rec in df.to_dict("records"):
        rec = {k: (None if _missing(v) else v.item() if hasattr(v, "item") and k != "t" else v)
               for k, v in rec.items()}
        rec["t"] = pd.Timestamp(rec["t"]).strftime("%Y-%m-%dT%H:%M:%SZ")
        records.append(rec)
    return records
