"""`chart --out x.html` in a real browser: the file draws with the live page's
bands.js, so what it shows is checked where it is drawn. Headless Chromium over
the DevTools pipe (tests/cdp.py); no broker, no store."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "unit" / "analytics"))
from test_analytics_html import frame  # noqa: E402  (the unit tests' frame: a gap, two buckets)

from phasemeter.analytics.core import LATENCY_COLUMNS  # noqa: E402
from phasemeter.render.html import render_bands_html  # noqa: E402

pytestmark = pytest.mark.integration

SHOWN = """(() => ({panels: document.querySelectorAll('svg.panel').length,
  heads: [...document.querySelectorAll('.grid tr:first-child th')].map(t => t.textContent),
  rows: [...document.querySelectorAll('.grid tr th:first-child')].slice(1).map(t => t.innerText.replace('\\n', ' ')),
  med: document.querySelectorAll('svg.panel path.med').length,
  tails: [...document.querySelectorAll('svg.panel .tl')].map(t => t.textContent),
  text: document.getElementById('grid').innerText,
  svgText: [...document.querySelectorAll('svg.panel text')].map(t => t.textContent).join('|')}))()"""


@pytest.fixture(scope="module")
def chrome(tmp_path_factory):
    from cdp import Chrome, chromium_or_skip

    exe = chromium_or_skip("to check the HTML chart in a real browser")
    browser = Chrome(exe, tmp_path_factory.mktemp("profile"))
    yield browser
    browser.close()


def show(chrome, path: Path) -> dict:
    chrome.open(path.as_uri())
    chrome.wait("document.readyState === 'complete' && document.getElementById('grid').children.length > 0")
    return chrome.eval(SHOWN)


def test_throughput_grid_order_gaps_tail_and_hover(chrome, tmp_path):
    out = render_bands_html(frame(), tmp_path / "b.html", bucket_order=["8k-32k", "0-512"])
    got = show(chrome, out)
    assert got["panels"] == 2 * 2 * 2  # models × phases × buckets
    assert got["heads"][1:] == ["8k-32k", "0-512"]
    assert got["rows"] == ["llama-4-maverick prefill", "llama-4-maverick decode", "qwen3-32b prefill",
                           "qwen3-32b decode"]
    assert got["med"] == 2 * 8  # the gap breaks the median line: two segments per panel
    assert got["tails"] == ["slow tail p1"] * 8
    tip = chrome.eval("""(() => { const s = document.querySelector('svg.panel'), r = s.getBoundingClientRect();
        s.dispatchEvent(new MouseEvent('mousemove', {clientX: r.left + 60, clientY: r.top + 60, bubbles: true}));
        return document.getElementById('tip').textContent; })()""")
    df = frame()
    first = df[(df["model"] == "llama-4-maverick") & (df["input_bucket"] == "8k-32k")].iloc[0]  # the top-left panel
    assert f"slow p1={first['prefill_p1']:,.0f}" in tip and "2026-11-29 10:00:00 UTC" in tip, tip
    assert chrome.errors() == []


def test_variant_labels_abandoned_and_latency(chrome, tmp_path):
    df = frame(models=("m",), buckets=("0-512",), steps=3)
    df["abandoned"] = [2, 0, 1][: len(df)]
    df["abandoned_prefill"] = pd.array([1, 0, 1][: len(df)], dtype="Int64")
    df["abandoned_decode"] = pd.array([1, 0, 0][: len(df)], dtype="Int64")
    got = show(chrome, render_bands_html(df, tmp_path / "v.html", prefill_label="prefill (uncached)"))
    assert got["rows"] == ["m prefill (uncached)", "m decode"]
    assert "prefill (uncached) tokens/s" in got["svgText"]
    assert "abandoned 3 (2 before 1st token)" in got["svgText"] and "abandoned 3 (1 in decode)" in got["svgText"]
    unknown = df.assign(abandoned_prefill=pd.array([None] * len(df), dtype="Int64"))
    assert "|abandoned 3|" in show(chrome, render_bands_html(unknown, tmp_path / "u.html"))["svgText"]
    full = frame()
    lat = pd.DataFrame({c: full[c] if c in full else 0.5 for c in LATENCY_COLUMNS})
    got = show(chrome, render_bands_html(lat, tmp_path / "l.html"))
    assert got["panels"] == 8 and set(got["tails"]) == {"slow tail p99"}
    assert "(no generations in this window)" in show(chrome, render_bands_html(full.iloc[0:0], tmp_path / "e.html"))["text"]
    assert chrome.errors() == []


def test_attainment_row_only_when_given_and_says_when_no_slo_is_declared(chrome, tmp_path):
    """slo=None (no SLO declared): the chart is the bands alone, as before.
    A document without SLOs draws the one line saying how to declare one, the
    bands grid unchanged below it (the drawn row itself: test_live_slo.py)."""
    from phasemeter.analytics.live import NO_SLO, slo_document

    plain = render_bands_html(frame(), tmp_path / "p.html")
    assert show(chrome, plain)["panels"] == 8
    assert chrome.eval("document.getElementById('slo') === null && document.getElementById('phasemeter-slo') === null")
    doc = slo_document(None, [], None, None, 60, bucket_labels=["0-512", "8k-32k"])  # nothing to ask the store
    got = show(chrome, render_bands_html(frame(), tmp_path / "n.html", slo=doc))
    assert got["panels"] == 8
    assert chrome.eval("document.getElementById('slo').innerText").strip() == "SLO attainment: " + NO_SLO
    assert chrome.eval("document.querySelectorAll('#slo svg').length") == 0
    assert chrome.errors() == []
