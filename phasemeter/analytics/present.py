"""Render analytics results (table/csv/json) and charts (PNG or HTML by extension)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from phasemeter.output import HEADER_NOTE, format_table, json_records, num, to_csv, to_table
from phasemeter.queries import LEGEND
from phasemeter.timeparse import ArgError

from .core import LATENCY_METRICS, LATENCY_PCTS

LATENCY_NOTE = "latency seconds; HIGH percentiles are the slow tail (p99 = the slowest 1%)"


def _num(v) -> str:
    """Latencies are small: four decimals below 1 s."""
    if isinstance(v, float) and not math.isnan(v) and abs(v) < 1:
        return f"{v:.4f}"
    return num(v)


def _latency_table(df: pd.DataFrame, meta: dict) -> str:
    cols = [("t", "time (UTC)"), ("model", "model"), ("input_bucket", "bucket"), ("n", "n")]
    for m in LATENCY_METRICS:
        cols.append((f"{m}_n", f"{m} n"))
        cols += [(f"{m}_{p}", f"{m} {p}" + (" (slow)" if p == "p99" else "")) for p in LATENCY_PCTS]
    return format_table(df, cols, [LATENCY_NOTE, *_path_lines(meta)], fmt=_num)


def _path_lines(meta: dict) -> list[str]:
    return [f"path: {meta['path']} ({meta['reason']})", f"method: {meta['method']}"]


def _json(df: pd.DataFrame, meta: dict, note: str, **extra) -> str:
    return json.dumps({**{k: meta[k] for k in ("kind", "path", "reason", "method", "step_s", "start", "end")},
                       "note": note, **extra, "rows": json_records(df)}, indent=1, default=str)


def render(df: pd.DataFrame, fmt: str, meta: dict) -> str:
    """Text for `query bands` / `latency`; says which path (exact/rollup) answered."""
    if fmt == "csv":
        return to_csv(df)
    if meta["kind"] == "latency":
        return _json(df, meta, LATENCY_NOTE) if fmt == "json" else _latency_table(df, meta)
    if fmt == "json":
        # legend: p1 -> "slow tail p1", the words per column
        return _json(df, meta, HEADER_NOTE, legend=LEGEND)
    return to_table(df, [HEADER_NOTE, *_path_lines(meta)])


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
