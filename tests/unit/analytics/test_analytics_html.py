"""The interactive HTML chart is one self-contained file that draws with the
live page's own bands.js. What the panels show is checked in a real browser
(tests/integration/test_chart_html_browser.py); here: the file itself."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd

from phasemeter.analytics.core import LATENCY_COLUMNS
from phasemeter.render.assets import asset
from phasemeter.render.html import render_bands_html
from phasemeter.query.queries import BAND_COLUMNS


def frame(models=("llama-4-maverick", "qwen3-32b"), buckets=("0-512", "8k-32k"), steps=12, seed=1):
    rng = np.random.default_rng(seed)
    rows = []
    for m in models:
        for b in buckets:
            for i in range(steps):
                if i == 5:
                    continue  # a gap: lines must break, not bridge
                base = 9000 * rng.lognormal(0, 0.1)
                rec = {"t": pd.Timestamp("2026-11-29T10:00:00") + pd.Timedelta(minutes=i), "model": m,
                       "input_bucket": b, "n": 100 + i}
                for ph, scale in (("prefill", 1.0), ("decode", 0.006)):
                    rec[f"{ph}_n"] = 99 + i
                    for p, f in (("p1", 0.4), ("p5", 0.6), ("p50", 1.0), ("p95", 1.4), ("p99", 1.6)):
                        rec[f"{ph}_{p}"] = base * scale * f
                rows.append(rec)
    return pd.DataFrame(rows)[BAND_COLUMNS]


def data_of(text: str) -> dict:
    return json.loads(re.search(r'id="phasemeter-data">(.*?)</script>', text, re.S).group(1).replace("<\\/", "</"))


def test_html_is_self_contained_and_carries_the_page_code_and_data(tmp_path):
    df = frame()
    out = render_bands_html(df, tmp_path / "b.html", bucket_order=["8k-32k", "0-512"], title="test <chart>")
    text = out.read_text()
    assert list(tmp_path.iterdir()) == [out]
    assert "test &lt;chart&gt;" in text and "slow tail p1" in text
    assert not re.search(r"<script[^>]+src=", text) and not re.search(r"https?://", text)
    # the same drawing code and stylesheet as the live page, inlined
    assert asset("bands.js").decode().replace("</", "<\\/") in text and asset("live.css").decode() in text
    data = data_of(text)
    assert len(data["rows"]) == len(df) and data["rows"][0]["prefill_p1"] == df.iloc[0]["prefill_p1"]
    assert data["bucket_order"] == ["8k-32k", "0-512"] and data["prefill_label"] == "prefill"
    assert text.count("</script>") == 3  # the data, bands.js, the boot: nothing closed one early


def test_latency_frame_and_empty(tmp_path):
    df = frame()
    lat = pd.DataFrame({c: df[c] if c in df else 0.5 for c in LATENCY_COLUMNS})
    text = render_bands_html(lat, tmp_path / "l.html").read_text()
    assert "- - slow tail p99" in text and "p50–p90" in text and "HIGH percentile" in text
    empty = render_bands_html(df.iloc[0:0], tmp_path / "e.html").read_text()
    assert '<div id="grid"><p>(no generations in this window)</p>' in empty and data_of(empty)["rows"] == []


def test_variant_notes_and_abandoned_counts_are_in_the_file(tmp_path):
    df = frame(models=("m",), buckets=("0-512",), steps=3)
    df["abandoned"] = [2, 0, 1][: len(df)]
    df["abandoned_prefill"] = pd.array([1, 0, 1][: len(df)], dtype="Int64")
    df["abandoned_decode"] = pd.array([1, 0, 0][: len(df)], dtype="Int64")
    notes = ["prefill = uncached: prefill_tps_uncached", "abandoned generations excluded"]
    text = render_bands_html(df, tmp_path / "v.html", prefill_label="prefill (uncached)", notes=notes).read_text()
    assert '<p class="note">abandoned generations excluded</p>' in text
    data = data_of(text)
    assert data["prefill_label"] == "prefill (uncached)" and data["notes"][0].startswith("prefill = uncached")
    assert data["rows"][0]["abandoned_prefill"] == 1
    unknown = df.assign(abandoned_prefill=pd.array([None] * len(df), dtype="Int64"))
    assert data_of(render_bands_html(unknown, tmp_path / "u.html").read_text())["rows"][0]["abandoned_prefill"] is None
