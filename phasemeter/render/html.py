"""Interactive percentile-band chart as ONE self-contained HTML file.

The panels are drawn by the live page's own code (phasemeter/render/live/
bands.js, inlined here with its stylesheet), so `chart --out x.html` and the
worker's page cannot drift apart. The rows are embedded as JSON
(id="phasemeter-data", the records `query bands --format json` prints); no
CDN, no server. Drawing needs JavaScript: without it the file says so and
still carries every value in that JSON.

Grid: one row per model × phase (prefill, decode), one column per input
bucket in the edges' order. Throughput panels shade p1–p99 and p5–p95, draw
the median and the slow-tail p1 in red, labelled in words (the LOW end is the
slow tail). Latency frames (phasemeter.analytics LATENCY_COLUMNS) shade
p50–p90 with the slow-tail p99 (the HIGH end). Abandoned counts show per
panel; `notes` lines go under the title.

With `slo` (the /api/slo document, phasemeter.analytics.live.slo_document,
for the SLOs declared in PHASEMETER_SLOS) an attainment row goes above the
grid, drawn by the same bands.js code as the live page's (id="phasemeter-slo").
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import pandas as pd

from phasemeter.files import write_file
from phasemeter.render.assets import asset
from phasemeter.timeparse import ISO_UTC

BAND, MEDIAN, TAIL = "#4c72b0", "#1f3b73", "#c0392b"
NOTES = {"throughput": ("throughput: lower = slower, so the LOW percentiles (p1, p5) are the slow tail",
                        ("p1–p99", "p5–p95"), "slow tail p1"),
         "latency": ("latency: higher = slower, so the HIGH percentile (p99) is the slow tail",
                     (None, "p50–p90"), "slow tail p99")}

# Reads the embedded rows and hands them to bands.js, as live.js does with /api/bands.
_BOOT = """(function(){var B=PMBands,doc=JSON.parse(document.getElementById('phasemeter-data').textContent),
rows=doc.rows,sp=B.spec(rows),cells=B.cells(rows),el=document.getElementById('grid'),
ts=rows.map(function(r){return B.ms(r.t);}).sort(function(a,b){return a-b;}),step=Infinity;
for(var i=1;i<ts.length;i++){var d=(ts[i]-ts[i-1])/1000;if(d>0&&d<step)step=d;}
if(step===Infinity)step=60;var lo=ts[0],hi=ts[ts.length-1]+(lo===ts[ts.length-1]?step*1000:0);
var panels=B.grid(el,cells,doc.bucket_order,sp,doc.prefill_label);B.draw(panels,cells,sp,lo,hi,step);
B.hover(el,document.getElementById('tip'),function(){return {panels:panels,cells:cells,spec:sp,lo:lo,hi:hi};});
var s=document.getElementById('phasemeter-slo');if(!s)return;var sd=JSON.parse(s.textContent),m=(sd.slos[0]||{}).meta;
if(!ts.length&&m){lo=B.ms(m.start);hi=B.ms(m.end);}
var v=B.sloView(document.getElementById('slo'),sd,doc.bucket_order.length?doc.bucket_order:sd.bucket_order,lo,hi);
B.hover(document.getElementById('slo'),document.getElementById('tip'),function(){return {panels:v.panels,cells:v.cells,tip:B.sloTip,lo:lo,hi:hi};});
})();"""


def _kind(df: pd.DataFrame) -> str:
    if "prefill_p50" in df.columns:
        return "throughput"
    if "ttft_p50" in df.columns:
        return "latency"
    raise ValueError("render_bands_html: expected band columns (prefill_p50, ...) or latency columns (ttft_p50, ...)")


def _script(text: str) -> str:
    """Inline-safe: nothing in it may close the <script> element early."""
    return text.replace("</", "<\\/")


def _slo_json(slo: dict | None) -> str:
    if slo is None:
        return ""
    return f'<script type="application/json" id="phasemeter-slo">{_script(json.dumps(slo))}</script>'


def render_bands_html(df: pd.DataFrame, path, *, bucket_order: list[str] | None = None,
                      title: str | None = None, notes: list[str] | None = None,
                      prefill_label: str = "prefill", slo: dict | None = None) -> Path:
    """Write the chart; returns the path. Accepts BAND_COLUMNS or latency frames.
    `prefill_label` names the prefill variant shown (row headers, axes, tooltips);
    `slo`: the attainment document to draw above the grid (None: no row)."""
    notes = list(notes or [])
    kind = _kind(df)
    note, (outer, band), tail = NOTES[kind]
    out = Path(path)
    df = df.copy()
    df["t"] = pd.to_datetime(df["t"])
    if df["t"].dt.tz is not None:
        df["t"] = df["t"].dt.tz_convert("UTC").dt.tz_localize(None)
    df["model"] = df["model"].astype(str)
    df["input_bucket"] = df["input_bucket"].astype(str)
    title = title or "phasemeter — percentile bands"
    seen = list(dict.fromkeys(df["input_bucket"]))
    order = [b for b in (bucket_order or []) if b in seen] + [b for b in seen if b not in (bucket_order or [])]
    records = json.loads(df.assign(t=df["t"].dt.strftime(ISO_UTC))
                         .to_json(orient="records", double_precision=15))
    data = json.dumps({"title": title, "note": note, "notes": notes, "bucket_order": order,
                       "prefill_label": prefill_label, "rows": records})
    legend = ((f'<span style="color:{BAND};opacity:.5">■ {outer}</span>' if outer else "")
              + f'<span style="color:{BAND}">■ {band}</span><span style="color:{MEDIAN}">— median</span>'
              + f'<span style="color:{TAIL}">- - {tail}</span>')
    doc = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{asset("live.css").decode()}.legend span{{margin-right:14px}}</style></head><body>
<h1>{html.escape(title)}</h1>
<p class="note">{html.escape(note)}. Hover a panel for values.</p>
{''.join(f'<p class="note">{html.escape(n)}</p>' for n in notes)}
<p class="legend">{legend}</p>
{'<div id="slo"></div>' if slo is not None else ''}<div id="grid">{'<p>(no generations in this window)</p>' if df.empty else ''}<noscript><p>The panels are drawn with JavaScript; the values are in this file as JSON
(script id="phasemeter-data").</p></noscript></div>
<div id="tip"></div>
<script type="application/json" id="phasemeter-data">{_script(data)}</script>
{_slo_json(slo)}
<script>{_script(asset("bands.js").decode())}</script>
<script>{_BOOT}</script>
</body></html>
"""
    return write_file(out, doc.encode("utf-8"))
