"""Render analytics results (table/csv/json) and charts (PNG or HTML by extension)."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pandas as pd

from phasemeter.timeparse import ArgError

from .core import LATENCY_METRICS, LATENCY_PCTS

LATENCY_NOTE = "latency seconds; HIGH percentiles are the slow tail (p99 = the slowest 1%)"


def _num(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 100 else (f"{v:.2f}" if abs(v) >= 1 else f"{v:.4f}")
    return f"{v:,}"


def _latency_table(df: pd.DataFrame, meta: dict) -> str:
    cols = [("t", "time (UTC)"), ("model", "model"), ("input_bucket", "bucket"), ("n", "n")]
    for m in LATENCY_METRICS:
        cols.append((f"{m}_n", f"{m} n"))
        cols += [(f"{m}_{p}", f"{m} {p}" + (" (slow)" if p == "p99" else "")) for p in LATENCY_PCTS]
    rows = [[h for _, h in cols]]
    for rec in df.to_dict("records"):
        t = rec["t"]
        rows.append([t.strftime("%Y-%m-%d %H:%M:%S") if hasattr(t, "strftime") else str(t)]
                    + [rec[c] if c in ("model", "input_bucket") else _num(rec[c]) for c, _ in cols[1:]])
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(cols))]
    lines = [f"# {LATENCY_NOTE}", f"# path: {meta['path']} ({meta['reason']})", f"# method: {meta['method']}"]
    for i, r in enumerate(rows):
        lines.append("  ".join(str(v).rjust(w) if i and j >= 3 else str(v).ljust(w)
                               for j, (v, w) in enumerate(zip(r, widths))))
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    if len(rows) == 1:
        lines.append("(no generations in this window)")
    return "\n".join(lines)


def _json(df: pd.DataFrame, meta: dict, note: str) -> str:
    records = []
    for rec in df.to_dict("records"):
        rec = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in rec.items()}
        rec["t"] = pd.Timestamp(rec["t"]).strftime("%Y-%m-%dT%H:%M:%SZ")
        records.append(rec)
    return json.dumps({**{k: meta[k] for k in ("kind", "path", "reason", "method", "step_s", "start", "end")},
                       "note": note, "rows": records}, indent=1, default=str)


def render(df: pd.DataFrame, fmt: str, meta: dict) -> str:
    """Text for `query bands` / `latency`; says which path (exact/rollup) answered."""
    if fmt == "csv":
        buf = io.StringIO()
        df.to_csv(buf, index=False, date_format="%Y-%m-%dT%H:%M:%SZ")
        return buf.getvalue()
    if meta["kind"] == "latency":
        return _json(df, meta, LATENCY_NOTE) if fmt == "json" else _latency_table(df, meta)
    from phasemeter.output import HEADER_NOTE, to_table

    if fmt == "json":
        from phasemeter.queries import LEGEND

        payload = json.loads(_json(df, meta, HEADER_NOTE))
        payload["legend"] = LEGEND  # p1 -> "slow tail p1": the words, per column
        return json.dumps(payload, indent=1)
    lines = to_table(df).splitlines()
    out = []
    for line in lines:
        if line.startswith("# method:"):
            out.append(f"# path: {meta['path']} ({meta['reason']})")
            line = f"# method: {meta['method']}"
        out.append(line)
    return "\n".join(out)


def write_chart(df: pd.DataFrame, meta: dict, out: str | Path, title: str | None = None) -> Path:
    """`.html` -> self-contained interactive HTML; anything else -> PNG (matplotlib)."""
    out = Path(out)
    suffix = f" — {meta['path']} path, step {meta['step_s']}s"
    if out.suffix.lower() in (".html", ".htm"):
        from phasemeter.charts_html import render_bands_html

        return render_bands_html(df, out, bucket_order=meta.get("bucket_order"),
                                 title=(title or _default_title(meta)) + suffix)
    if meta["kind"] == "latency":
        raise ArgError(f"--out {out}: latency charts are HTML only; use an .html path")
    from phasemeter.charts import DEFAULT_TITLE, render_bands_png

    return render_bands_png(df, out, bucket_order=meta.get("bucket_order"), title=(title or DEFAULT_TITLE) + suffix)


def _default_title(meta: dict) -> str:
    if meta["kind"] == "latency":
        return "phasemeter — latency (high percentiles = slow tail)"
    return "phasemeter — throughput bands (low percentiles = slow tail)"
