"""The interactive HTML chart is one self-contained, non-trivial file."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd

from phasemeter.analytics.core import LATENCY_COLUMNS
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


def test_html_is_self_contained_and_has_the_data(tmp_path):
    df = frame()
    out = render_bands_html(df, tmp_path / "b.html", bucket_order=["8k-32k", "0-512"], title="test <chart>")
    text = out.read_text()
    assert list(tmp_path.iterdir()) == [out]
    assert len(text) > 20_000 and text.count("<svg") == 2 * 2 * 2  # models × phases × buckets
    assert "llama-4-maverick" in text and "qwen3-32b" in text
    assert "slow tail p1" in text and "test &lt;chart&gt;" in text
    assert not re.search(r"<script[^>]+src=", text) and not re.search(r"https?://", text)
    # hover tooltips carry values; the embedded data round-trips
    first = df.iloc[0]
    assert f"p50={first['prefill_p50']:,.0f}" in text
    data = json.loads(re.search(r'id="phasemeter-data">(.*?)</script>', text, re.S).group(1))
    assert len(data["rows"]) == len(df)
    assert data["rows"][0]["prefill_p1"] == first["prefill_p1"]
    # bucket order respected in the header
    assert text.index(">8k-32k</th>") < text.index(">0-512</th>")
    # the gap breaks the median line: two path segments per panel
    assert text.count('class="med"') == 2 * 8


def test_latency_frame_and_empty(tmp_path):
    df = frame()
    lat = pd.DataFrame({c: df[c] if c in df else 0.5 for c in LATENCY_COLUMNS})
    for m in ("ttft", "tpot", "queue"):
        lat[f"{m}_n"] = 10
    text = render_bands_html(lat, tmp_path / "l.html").read_text()
    assert "slow tail p99" in text
    empty = render_bands_html(df.iloc[0:0], tmp_path / "e.html").read_text()
    assert "no generations" in empty


def test_variant_notes_and_abandoned_counts(tmp_path):
    df = frame(models=("m",), buckets=("0-512",), steps=3)
    df["abandoned"] = [2, 0, 1][: len(df)]
    df["abandoned_prefill"] = pd.array([1, 0, 1][: len(df)], dtype="Int64")
    df["abandoned_decode"] = pd.array([1, 0, 0][: len(df)], dtype="Int64")
    notes = ["prefill = uncached: prefill_tps_uncached", "abandoned generations excluded"]
    text = render_bands_html(df, tmp_path / "v.html", prefill_label="prefill (uncached)", notes=notes).read_text()
    assert "m<br>prefill (uncached)</th>" in text and "prefill (uncached) tokens/s" in text
    assert '<p class="note">abandoned generations excluded</p>' in text
    assert ">abandoned 3 (2 before 1st token)<" in text and ">abandoned 3 (1 in decode)<" in text
    assert "| abandoned 2 (1 before 1st token)" in text  # per-step tooltip
    data = json.loads(re.search(r'id="phasemeter-data">(.*?)</script>', text, re.S).group(1))
    assert data["notes"][0].startswith("prefill = uncached") and data["rows"][0]["abandoned_prefill"] == 1
    unknown = df.assign(abandoned_prefill=pd.array([None] * len(df), dtype="Int64"))
    text = render_bands_html(unknown, tmp_path / "u.html").read_text()
    assert ">abandoned 3<" in text  # rollup: no split, never a made-up 0
