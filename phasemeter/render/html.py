"""Interactive percentile-band chart as ONE self-contained HTML file.

Inline SVG drawn here (no CDN, no server, no JS library), the data embedded
as JSON, and a few lines of inline JS for a hover tooltip; every point also
carries an SVG <title>, so values show on hover even with JS disabled.

Grid: one row per model × phase (prefill, decode), one column per input
bucket. Each panel: shaded p5–p95 band, median line, and the slow-tail p1
line in red, labelled in words. For throughput the slow tail is the LOW end.
Latency frames (phasemeter.analytics LATENCY_COLUMNS) work too: shaded
p50–p90, median, slow-tail p99 (the HIGH end). Frames with abandoned counts
show them per panel and per step; `notes` lines go under the title (which
prefill variant, abandoned included or not).
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path

import pandas as pd

W, H = 300, 170
ML, MR, MT, MB = 52, 10, 26, 24
BAND, MEDIAN, TAIL = "#4c72b0", "#1f3b73", "#c0392b"

THROUGHPUT = {"phases": (("prefill", "prefill tokens/s"), ("decode", "decode tokens/s")),
              "band": ("p5", "p95"), "median": "p50", "tail": "p1", "tail_label": "slow tail p1",
              "pcts": ("p1", "p5", "p50", "p95", "p99"),
              "note": "throughput: lower = slower, so the LOW percentiles (p1, p5) are the slow tail"}
LATENCY = {"phases": (("ttft", "TTFT s"), ("tpot", "TPOT s")),
           "band": ("p50", "p90"), "median": "p50", "tail": "p99", "tail_label": "slow tail p99",
           "pcts": ("p50", "p90", "p99"),
           "note": "latency: higher = slower, so the HIGH percentile (p99) is the slow tail"}


def _spec(df: pd.DataFrame) -> dict:
    if "prefill_p50" in df.columns:
        return THROUGHPUT
    if "ttft_p50" in df.columns:
        return LATENCY
    raise ValueError("render_bands_html: expected band columns (prefill_p50, ...) or latency columns (ttft_p50, ...)")


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    v = float(v)
    return f"{v:,.0f}" if abs(v) >= 100 else (f"{v:.2f}" if abs(v) >= 1 else f"{v:.4g}")


def _segments(points: list[tuple[float, float | None]]) -> list[list[tuple[float, float]]]:
    segs, cur = [], []
    for x, y in points:
        if y is None:
            if cur:
                segs.append(cur)
            cur = []
        else:
            cur.append((x, y))
    if cur:
        segs.append(cur)
    return segs


def _path(points) -> str:
    return "".join(f"M{x:.1f},{y:.1f}" if i == 0 else f"L{x:.1f},{y:.1f}" for i, (x, y) in enumerate(points))


def _num(v) -> float | None:
    return None if v is None or pd.isna(v) else float(v)


# Which abandoned split belongs to a panel: before the first token (no prefill
# rate, no ttft) or after it (decode, tpot).
_SPLIT = {"prefill": ("abandoned_prefill", "before 1st token"), "ttft": ("abandoned_prefill", "before 1st token"),
          "decode": ("abandoned_decode", "in decode"), "tpot": ("abandoned_decode", "in decode")}


def _abandoned(rows: pd.DataFrame, phase: str) -> str:
    """"abandoned 12 (5 before 1st token)"; no split when unknown (rollup); "" without the columns."""
    if "abandoned" not in rows.columns:
        return ""
    total = int(pd.to_numeric(rows["abandoned"]).sum())
    col, where = _SPLIT[phase]
    split = rows[col] if col in rows.columns else None
    if split is None or split.isna().any():
        return f"abandoned {total:,}"
    return f"abandoned {total:,} ({int(split.sum()):,} {where})"


def _panel(g: pd.DataFrame, phase: str, unit: str, spec: dict, t_lo: float, t_hi: float, step: float,
           title: str) -> str:
    lo_c, hi_c = (f"{phase}_{spec['band'][0]}", f"{phase}_{spec['band'][1]}")
    med_c, tail_c, n_c = f"{phase}_{spec['median']}", f"{phase}_{spec['tail']}", f"{phase}_n"
    vals = [v for c in (lo_c, hi_c, med_c, tail_c) for v in g[c].tolist() if _num(v) is not None]
    y_max = (max(vals) * (1.2 if "abandoned" in g.columns else 1.08)) if vals else 1.0  # room for the counts
    y_max = y_max if y_max > 0 else 1.0
    pw, ph = W - ML - MR, H - MT - MB
    span = max(t_hi - t_lo, 1.0)

    def sx(t):
        return ML + (t - t_lo) / span * pw

    def sy(v):
        return MT + ph - (v / y_max) * ph

    ts = [pd.Timestamp(t).timestamp() for t in g["t"]]
    # Break lines where steps are missing (no bridging of gaps).
    rows = []
    for i, t in enumerate(ts):
        if i and t - ts[i - 1] > step * 1.5:
            rows.append(None)
        rows.append(i)

    def series(col):
        return [(sx(ts[i]), sy(_num(g[col].iloc[i]))) if i is not None and _num(g[col].iloc[i]) is not None
                else (0.0, None) for i in rows]

    out = [f'<svg class="panel" width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img">',
           f'<text x="{ML}" y="14" class="pt">{html.escape(title)}</text>',
           f'<text x="{W - MR}" y="14" class="pn" text-anchor="end">n={int(g[n_c].sum()):,}</text>',
           f'<line x1="{ML}" y1="{MT + ph}" x2="{W - MR}" y2="{MT + ph}" class="ax"/>',
           f'<line x1="{ML}" y1="{MT}" x2="{ML}" y2="{MT + ph}" class="ax"/>']
    if "abandoned" in g.columns:  # inside the plot, top right, under the n
        out.append(f'<text x="{W - MR - 2}" y="{MT + 9}" class="pn" text-anchor="end">'
                   f'{html.escape(_abandoned(g, phase))}</text>')
    for frac in (0.0, 0.5, 1.0):
        v = y_max * frac
        out.append(f'<text x="{ML - 4}" y="{sy(v) + 3:.1f}" class="tk" text-anchor="end">{_fmt(v)}</text>')
    out.append(f'<text x="12" y="{MT + ph / 2:.0f}" class="tk" transform="rotate(-90 12 {MT + ph / 2:.0f})" '
               f'text-anchor="middle">{html.escape(unit)}</text>')
    for seg_lo, seg_hi in zip(_segments(series(lo_c)), _segments(series(hi_c))):
        poly = seg_hi + seg_lo[::-1]
        out.append(f'<path d="{_path(poly)}Z" class="band"/>')
    for seg in _segments(series(med_c)):
        out.append(f'<path d="{_path(seg)}" class="med"/>')
    tail_segs = _segments(series(tail_c))
    for seg in tail_segs:
        out.append(f'<path d="{_path(seg)}" class="tail"/>')
    if tail_segs:
        x, y = tail_segs[-1][-1]
        out.append(f'<text x="{min(x, W - MR - 2):.1f}" y="{min(y + 11, MT + ph - 2):.1f}" class="tl" '
                   f'text-anchor="end">{spec["tail_label"]}</text>')
    # Hover targets: one column per step, tooltip text in data-tip and <title>.
    colw = max(pw / max(len(ts), 1), 2.0)
    for i, t in enumerate(ts):
        r = g.iloc[i]
        tip = (f"{pd.Timestamp(r['t']).strftime('%Y-%m-%d %H:%M:%S')} UTC | {title} | n={int(r[n_c]):,}"
               + "".join(f" | {('slow ' if p == spec['tail'] else '')}{p}={_fmt(r[f'{phase}_{p}'])}"
                         for p in spec["pcts"])
               + (f" | {_abandoned(g.iloc[i:i + 1], phase)}" if "abandoned" in g.columns else ""))
        tip = html.escape(tip, quote=True)
        out.append(f'<rect x="{sx(t) - colw / 2:.1f}" y="{MT}" width="{colw:.1f}" height="{ph}" class="hit" '
                   f'data-tip="{tip}"><title>{tip}</title></rect>')
    out.append(f'<text x="{ML}" y="{H - 6}" class="tk">{pd.Timestamp(t_lo, unit="s").strftime("%m-%d %H:%M")}</text>')
    out.append(f'<text x="{W - MR}" y="{H - 6}" class="tk" text-anchor="end">'
               f'{pd.Timestamp(t_hi, unit="s").strftime("%m-%d %H:%M")}</text>')
    out.append("</svg>")
    return "".join(out)


_CSS = """body{font:13px system-ui,sans-serif;margin:16px;color:#222}h1{font-size:17px;margin:0 0 4px}
.note{color:#555;margin:0 0 10px}.grid{border-collapse:collapse}.grid td,.grid th{padding:2px;vertical-align:top}
.grid th{font-weight:600;text-align:left}.pt{font-size:11px;font-weight:600}.pn,.tk{font-size:10px;fill:#555}
.ax{stroke:#999;stroke-width:1}.band{fill:%(band)s;fill-opacity:.25;stroke:none}
.med{fill:none;stroke:%(med)s;stroke-width:1.6}.tail{fill:none;stroke:%(tail)s;stroke-width:1.3;stroke-dasharray:4 2}
.tl{font-size:10px;fill:%(tail)s;font-weight:600}.hit{fill:transparent}.hit:hover{fill:#0001}
#tip{position:fixed;display:none;background:#fff;border:1px solid #888;padding:4px 6px;font-size:12px;
pointer-events:none;white-space:pre;box-shadow:0 1px 4px #0003}.legend span{margin-right:14px}""" % {
    "band": BAND, "med": MEDIAN, "tail": TAIL}

_JS = """(function(){var tip=document.getElementById('tip');
document.querySelectorAll('rect.hit').forEach(function(r){
r.addEventListener('mousemove',function(e){tip.textContent=r.getAttribute('data-tip').split(' | ').join('\\n');
tip.style.display='block';tip.style.left=(e.clientX+12)+'px';tip.style.top=(e.clientY+12)+'px';});
r.addEventListener('mouseleave',function(){tip.style.display='none';});});})();"""


def render_bands_html(df: pd.DataFrame, path, *, bucket_order: list[str] | None = None,
                      title: str | None = None, notes: list[str] | None = None,
                      prefill_label: str = "prefill") -> Path:
    """Write the chart; returns the path. Accepts BAND_COLUMNS or latency frames.
    `prefill_label` names the prefill variant shown (row headers, axes, tooltips)."""
    notes = list(notes or [])
    spec = _spec(df)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    df = df.copy()
    df["t"] = pd.to_datetime(df["t"])
    if df["t"].dt.tz is not None:
        df["t"] = df["t"].dt.tz_convert("UTC").dt.tz_localize(None)
    df["model"] = df["model"].astype(str)
    df["input_bucket"] = df["input_bucket"].astype(str)
    title = title or "phasemeter — percentile bands"
    models = list(dict.fromkeys(df["model"]))
    seen = list(dict.fromkeys(df["input_bucket"]))
    buckets = [b for b in (bucket_order or []) if b in seen] + [b for b in seen if b not in (bucket_order or [])]
    body = []
    if df.empty:
        body.append("<p>(no generations in this window)</p>")
    else:
        ts = sorted(set(pd.Timestamp(t).timestamp() for t in df["t"]))
        diffs = [b - a for a, b in zip(ts, ts[1:]) if b > a]
        step = min(diffs) if diffs else 60.0
        t_lo, t_hi = ts[0], ts[-1] + (step if len(ts) == 1 else 0)
        body.append('<table class="grid"><tr><th></th>'
                    + "".join(f"<th>{html.escape(b)}</th>" for b in buckets) + "</tr>")
        for model in models:
            for phase, unit in spec["phases"]:
                shown = prefill_label if phase == "prefill" else phase
                unit = unit.replace("prefill", prefill_label, 1)
                body.append(f"<tr><th>{html.escape(model)}<br>{html.escape(shown)}</th>")
                for b in buckets:
                    g = df[(df["model"] == model) & (df["input_bucket"] == b)].sort_values("t")
                    cell = (_panel(g, phase, unit, spec, t_lo, t_hi, step, f"{model} · {shown} · {b}")
                            if len(g) else "")
                    body.append(f"<td>{cell}</td>")
                body.append("</tr>")
        body.append("</table>")
    records = json.loads(df.assign(t=df["t"].dt.strftime("%Y-%m-%dT%H:%M:%SZ"))
                         .to_json(orient="records", double_precision=15))
    data = json.dumps({"title": title, "note": spec["note"], "notes": notes, "rows": records}).replace("</", "<\\/")
    band_lbl = f"{spec['band'][0]}–{spec['band'][1]} band"
    doc = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{_CSS}</style></head><body>
<h1>{html.escape(title)}</h1>
<p class="note">{html.escape(spec['note'])}. Hover a panel for values.</p>
{''.join(f'<p class="note">{html.escape(n)}</p>' for n in notes)}
<p class="legend"><span style="color:{BAND}">■ {band_lbl}</span><span style="color:{MEDIAN}">— median</span>
<span style="color:{TAIL}">- - {spec['tail_label']}</span></p>
{''.join(body)}
<div id="tip"></div>
<script type="application/json" id="phasemeter-data">{data}</script>
<script>{_JS}</script>
</body></html>
"""
    out.write_text(doc, encoding="utf-8")
    return out
