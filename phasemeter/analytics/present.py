"""Render analytics results (table/csv/json) and charts (PNG or HTML by extension).

Every output says which path answered, which prefill variant the prefill_*
columns hold, and whether abandoned generations are in n and the percentiles
(variants.header_lines); the abandoned counts are columns of every frame.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from phasemeter.render.table import (HEADER_NOTE, POOL_TITLES, abandoned_columns, band_columns, choose_columns,
                                     format_table, json_records, lead_columns, num, to_csv, to_table)
from phasemeter.query.queries import LEGEND
from phasemeter.timeparse import ArgError

from phasemeter.analytics.core import LATENCY_METRICS, LATENCY_PCTS, STALL_COLUMNS
from phasemeter.analytics.variants import PREFILL_VARIANTS, header_lines, prefill_label

LATENCY_NOTE = "latency seconds; HIGH percentiles are the slow tail (p99 = the slowest 1%)"
STALLS_NOTE = ("decode stalls: gap = each generation's largest gap between streamed chunks (max_gap_s, seconds); "
               "HIGH percentiles are the slow tail; stalled share = generations with a gap over their "
               "threshold / generations with a stall verdict; rows without chunk data are left out of them")
STALLS_LEGEND = {
    "chunk_n": "generations in the cell with chunk data (the emitter's chunk() calls)",
    "gap_n": "of those, with a measured gap (two or more timed points)",
    "gap_p50": "median of max_gap_s", "gap_p99": "p99 of max_gap_s (slow tail)", "gap_max": "largest max_gap_s",
    "stalled_n": "generations with at least one gap over gap_threshold_s",
    "stalled_share": "stalled_n / generations with a stall verdict; null: none",
    "estimated_n": "generations whose output_tokens was counted by the gateway, not reported by the server",
}
ABANDONED_LEGEND = {
    "abandoned": "generations in the cell that never ended (status=abandoned)",
    "abandoned_prefill": "of those, abandoned before the first token (no prefill/ttft value); null: unknown "
                         "(rollup)",
    "abandoned_decode": "of those, abandoned after the first token; null: unknown (rollup)",
}


def _num(v) -> str:
    """Latencies are small: four decimals below 1 s."""
    if isinstance(v, float) and not math.isnan(v) and abs(v) < 1:
        return f"{v:.4f}"
    return num(v)


def _meta(meta: dict) -> dict:
    """Older callers' meta (no variants) means the defaults."""
    return {"abandoned": "include", "prefill": "total", "abandoned_split": True, **meta}


# The default latency table (fits 120 columns); --wide shows every column.
# A per-pool frame (--by) shows its pool and the KV transfer's median and
# tail instead of the queue's (which --wide or --columns still show).
LATENCY_DEFAULT = ("t", "model", "input_bucket", "n", "abandoned", "ttft_p50", "ttft_p99", "tpot_p50",
                   "tpot_p99", "queue_p50", "queue_p99")
LATENCY_POOL_DEFAULT = ("t", "model", *(c for c, _ in POOL_TITLES), "input_bucket", "n", "abandoned", "ttft_p50",
                        "ttft_p99", "tpot_p50", "tpot_p99", "kv_transfer_p50", "kv_transfer_p99")


def latency_columns(df: pd.DataFrame | None = None) -> list[tuple[str, str]]:
    cols = lead_columns(df) + [("n", "n")]
    cols += abandoned_columns(df) if df is not None else []
    kv = df is None or "kv_transfer_n" in df.columns  # every name, for --columns; else the frame's
    for m in LATENCY_METRICS + (("kv_transfer",) if kv else ()):
        label = "kv" if m == "kv_transfer" else m
        cols.append((f"{m}_n", f"{label} n"))
        cols += [(f"{m}_{p}", f"{label} slow {p}" if p == "p99" else f"{label} {p}") for p in LATENCY_PCTS]
    return cols


STALLS_TITLES = {"chunk_n": "chunk n", "gap_n": "gap n", "gap_p50": "gap p50", "gap_p99": "gap slow p99",
                 "gap_max": "gap max", "stalled_n": "stalled", "stalled_share": "stalled share",
                 "estimated_n": "est. count"}
STALLS_DEFAULT = ("t", "model", "input_bucket", "n", "chunk_n", "gap_p50", "gap_p99", "gap_max", "stalled_n",
                  "stalled_share", "abandoned")


def stall_columns(df: pd.DataFrame | None = None) -> list[tuple[str, str]]:
    cols = [("t", "time (UTC)"), ("model", "model"), ("input_bucket", "bucket"), ("n", "n")]
    cols += [(k, STALLS_TITLES[k]) for k in STALL_COLUMNS if k in STALLS_TITLES]
    return cols + (abandoned_columns(df) if df is not None else [])


def table_columns(kind: str) -> list[str]:
    """Every column name `--columns` accepts for `kind` (bands, latency, stalls)."""
    from phasemeter.render.table import ABANDONED_TITLES

    if kind == "stalls":
        return [k for k, _ in stall_columns()] + [k for k, _ in ABANDONED_TITLES]
    cols = latency_columns() if kind == "latency" else band_columns()
    return [k for k, _ in cols] + [k for k, _ in ABANDONED_TITLES]


def _latency_table(df: pd.DataFrame, meta: dict, columns=None, wide=False) -> str:
    every = latency_columns(df)
    pooled = meta.get("by") is not None
    cols = choose_columns(every, LATENCY_POOL_DEFAULT if pooled else LATENCY_DEFAULT, columns, wide)
    groups = None if wide else {**{m: m for m in LATENCY_METRICS}, **({"kv_transfer": "kv"} if pooled else {})}
    return format_table(df, cols, [LATENCY_NOTE, *_head_lines(meta)], fmt=_num, groups=groups,
                        hidden=len(every) - len(cols), unit=" seconds", max_width=None if wide else 120)


def _stalls_table(df: pd.DataFrame, meta: dict, columns=None, wide=False) -> str:
    every = stall_columns(df)
    cols = choose_columns(every, STALLS_DEFAULT, columns, wide)
    return format_table(df, cols, [STALLS_NOTE, *_head_lines(meta)], fmt=_num, hidden=len(every) - len(cols),
                        max_width=None if wide else 120)


def _head_lines(meta: dict) -> list[str]:
    rule = [f"step: {meta['step_s']}s, {meta['step_rule']}"] if meta.get("step_rule") else []
    return [f"path: {meta['path']} ({meta['reason']})", f"method: {meta['method']}", *rule, *header_lines(meta)]


def _json(df: pd.DataFrame, meta: dict, note: str, **extra) -> str:
    head = {k: meta[k] for k in ("kind", "path", "reason", "method", "step_s", "start", "end", "abandoned")}
    if meta.get("by") is not None:
        head["by"] = meta["by"]
    head["step_rule"] = meta.get("step_rule", "")
    if meta["kind"] == "bands":
        head.update(prefill=meta["prefill"], prefill_definition=PREFILL_VARIANTS[meta["prefill"]])
    doc = json.dumps({**head, "abandoned_split": meta["abandoned_split"], "note": note,
                      "notes": header_lines(meta), **extra, "abandoned_legend": ABANDONED_LEGEND,
                      "rows": _ROWS}, indent=1, default=str)
    # The rows one per line, each by the C encoder: json.dumps with an indent
    # is pure Python, 0.8 s for a day at 1-minute steps (28,800 rows). The
    # document parses to the same value as with every row indented.
    rows = json_records(df)
    body = "[\n  " + ",\n  ".join(json.dumps(r, default=str) for r in rows) + "\n ]" if rows else "[]"
    return doc.replace(json.dumps(_ROWS), body, 1)


# Stands for the rows while the rest of the document is indented (no note or legend holds it).
_ROWS = "\u0000phasemeter rows\u0000"


def render(df: pd.DataFrame, fmt: str, meta: dict, columns: list[str] | None = None, wide: bool = False) -> str:
    """Text for `query bands` / `latency`; says which path (exact/rollup) answered.
    Tables show the default columns (120 characters), `columns` or all (`wide`)."""
    meta = _meta(meta)
    if fmt == "csv":
        return to_csv(df)
    if meta["kind"] == "latency":
        return _json(df, meta, LATENCY_NOTE) if fmt == "json" else _latency_table(df, meta, columns, wide)
    if meta["kind"] == "stalls":
        return (_json(df, meta, STALLS_NOTE, legend=STALLS_LEGEND) if fmt == "json"
                else _stalls_table(df, meta, columns, wide))
    if fmt == "json":
        # legend: p1 -> "slow tail p1", the words per column
        return _json(df, meta, HEADER_NOTE, legend=LEGEND)
    return to_table(df, [HEADER_NOTE, *_head_lines(meta)], prefill_label=prefill_label(meta["prefill"]),
                    columns=columns, wide=wide)


def chart_notes(meta: dict) -> list[str]:
    """Short lines under a chart's title: variant and abandoned handling."""
    meta = _meta(meta)
    notes = [] if meta["kind"] != "bands" else [f"prefill = {meta['prefill']}: {PREFILL_VARIANTS[meta['prefill']]}"]
    verb = "included in" if meta["abandoned"] == "include" else "excluded from (--abandoned exclude)"
    split = "" if meta["abandoned_split"] else "; by phase: unknown on the rollup path"
    return notes + [f"abandoned generations {verb} n and percentiles; per-panel count shown{split}"]


def write_chart(df: pd.DataFrame, meta: dict, out: str | Path, title: str | None = None,
                slo: dict | None = None) -> Path:
    """`.html` -> self-contained interactive HTML (with the attainment row of
    `slo`, analytics.live.chart_slo's document, when given); `.png` or `.svg` -> matplotlib."""
    meta = _meta(meta)
    if meta["kind"] == "stalls":
        raise ArgError("--stalls is a table view (query bands --stalls); charts show throughput or latency: "
                       "drop --stalls")
    if meta.get("by") is not None:
        raise ArgError(f"--by {meta['by']} is a table view (one row per pool); charts show one band per model "
                       "and bucket: drop --by, or filter with --model")
    out = Path(out)
    if out.suffix.lower() not in (".html", ".htm", ".png", ".svg"):
        raise ArgError(f"--out {out}: the file must end in .png, .svg or .html")
    suffix = f" — {meta['path']} path, step {meta['step_s']}s"
    label = prefill_label(meta["prefill"])
    if out.suffix.lower() in (".html", ".htm"):
        from phasemeter.render.html import render_bands_html

        return render_bands_html(df, out, bucket_order=meta.get("bucket_order"),
                                 title=(title or _default_title(meta)) + suffix, notes=chart_notes(meta),
                                 prefill_label=label, slo=slo)
    if meta["kind"] == "latency":
        raise ArgError(f"--out {out}: latency charts are HTML only; use an .html path")
    from phasemeter.render.png import DEFAULT_TITLE, render_bands_png

    return render_bands_png(df, out, bucket_order=meta.get("bucket_order"), title=(title or DEFAULT_TITLE) + suffix,
                            notes=chart_notes(meta), prefill_label=label)


def _default_title(meta: dict) -> str:
    if meta["kind"] == "latency":
        return "phasemeter — latency (high percentiles = slow tail)"
    return "phasemeter — throughput bands (low percentiles = slow tail)"
