import struct

import numpy as np
import pandas as pd
import pytest

from phasemeter.render.png import render_bands_png

BUCKETS = ["0-512", "512-2k", "2k-8k", "8k-32k", "32k+"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def synthetic_bands(models=("llama-70b", "qwen-32b"), buckets=BUCKETS, steps=30, seed=7):
    """2 models x 5 buckets x 30 one-minute steps. Prefill drops ~40% in the
    long buckets in the second half; a few NaN steps; qwen-32b has no rows
    at all for 32k+ (bucket entirely empty for one model)."""
    rng = np.random.default_rng(seed)
    t0 = pd.Timestamp("2025-01-01 12:00")
    rows = []
    for mi, model in enumerate(models):
        for bi, bucket in enumerate(buckets):
            if model == "qwen-32b" and bucket == "32k+":
                continue
            for s in range(steps):
                pre = 2000.0 * (bi + 1) * (1 + 0.2 * mi)
                if bi >= 3 and s >= steps // 2:
                    pre *= 0.6  # the regression the chart must show
                dec = 60.0 - 6 * bi + 10 * mi
                row = {"t": t0 + pd.Timedelta(minutes=s), "model": model,
                       "input_bucket": bucket, "n": int(rng.integers(50, 400))}
                for ph, mid in (("prefill", pre), ("decode", dec)):
                    mid = mid * rng.normal(1, 0.04)
                    vals = dict(p1=mid * 0.45, p5=mid * 0.7, p50=mid, p95=mid * 1.15, p99=mid * 1.3)
                    nan = (s in (5, 6) and ph == "prefill") or (s == 20 and bi == 1)
                    row[f"{ph}_n"] = np.nan if nan else float(row["n"])
                    for k, v in vals.items():
                        row[f"{ph}_{k}"] = np.nan if nan else v
                rows.append(row)
    return pd.DataFrame(rows)


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_renders_valid_png(tmp_path):
    df = synthetic_bands()
    out = render_bands_png(df, tmp_path / "bands.png", bucket_order=BUCKETS)
    assert out == tmp_path / "bands.png"
    assert out.exists()
    assert out.stat().st_size > 30_000
    png_size(out)


def test_dimensions_scale_with_grid(tmp_path):
    df = synthetic_bands()
    big = render_bands_png(df, tmp_path / "big.png")  # 4 rows x 5 cols
    small_df = df[(df["model"] == "llama-70b") & df["input_bucket"].isin(BUCKETS[:2])]
    small = render_bands_png(small_df, tmp_path / "small.png")  # 2 rows x 2 cols
    (bw, bh), (sw, sh) = png_size(big), png_size(small)
    assert bw > sw * 2 and bh > sh * 1.5
    # roughly 3.2 in per column at 110 dpi
    assert abs(bw - (3.2 * 5 + 0.4) * 110) < 0.1 * bw


def test_bucket_order_and_unlisted_buckets(tmp_path):
    df = synthetic_bands()
    # stale order list: unknown label ignored, unlisted buckets still drawn
    out = render_bands_png(df, tmp_path / "o.png", bucket_order=["32k+", "nope", "0-512"],
                           title="custom")
    w, _ = png_size(out)
    assert abs(w - (3.2 * 5 + 0.4) * 110) < 0.1 * w


def test_empty_frame_still_renders(tmp_path):
    out = render_bands_png(synthetic_bands().iloc[0:0], tmp_path / "empty.png")
    png_size(out)


def test_missing_column_names_it(tmp_path):
    df = synthetic_bands().drop(columns=["decode_p5"])
    with pytest.raises(ValueError, match="decode_p5"):
        render_bands_png(df, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def with_abandoned(df, split_known=True):
    df = df.copy()
    df["abandoned"] = 3
    df["abandoned_prefill"] = pd.array([2 if split_known else None] * len(df), dtype="Int64")
    df["abandoned_decode"] = pd.array([1 if split_known else None] * len(df), dtype="Int64")
    return df


def test_abandoned_panel_label_by_phase():
    from phasemeter.render.png import _abandoned_label

    g = with_abandoned(synthetic_bands().iloc[:4])
    assert _abandoned_label(g, "prefill") == "\nabandoned 12 (8 before 1st token)"
    assert _abandoned_label(g, "decode") == "\nabandoned 12 (4 in decode)"
    assert _abandoned_label(with_abandoned(g, split_known=False), "prefill") == "\nabandoned 12"
    assert _abandoned_label(synthetic_bands().iloc[:4], "prefill") == ""


def test_notes_and_variant_label_render(tmp_path):
    df = with_abandoned(synthetic_bands())
    plain = render_bands_png(synthetic_bands(), tmp_path / "plain.png")
    out = render_bands_png(df, tmp_path / "v.png", bucket_order=BUCKETS, prefill_label="prefill (engine)",
                           notes=["prefill = engine: input_tokens / (ttft_s - queue_s)",
                                  "abandoned generations included in n and percentiles"])
    (_, h_plain), (_, h) = png_size(plain), png_size(out)
    assert h > h_plain  # the header grew by the note lines


def test_an_svg_path_gets_a_real_svg_with_the_slow_tail_labelled(tmp_path):
    import xml.etree.ElementTree as ET

    out = render_bands_png(synthetic_bands(), tmp_path / "bands.svg", bucket_order=BUCKETS)
    data = out.read_bytes()
    assert not data.startswith(PNG_MAGIC)
    root = ET.fromstring(data)
    assert root.tag.endswith("svg")
    texts = "".join(el.text or "" for el in root.iter() if el.tag.endswith("text"))
    assert "slow tail" in texts  # text stays text in an SVG, not glyph outlines


def test_write_chart_refuses_an_unknown_suffix_and_writes_nothing(tmp_path):
    from phasemeter.analytics.present import write_chart
    from phasemeter.timeparse import ArgError

    with pytest.raises(ArgError, match=r"--out .*x\.jpg: the file must end in \.png, \.svg or \.html"):
        write_chart(synthetic_bands(), {"kind": "bands", "path": "exact", "step_s": 60}, tmp_path / "x.jpg")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("ncols", [1, 2, 5])
def test_header_lines_fit_the_width_and_never_overlap(ncols):
    """Title, slow-tail note and notes are wrapped to the figure's width and
    stacked by their real height: in one column the default title takes two
    lines, and it used to be drawn over the red slow-tail note."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from phasemeter.render.png import DEFAULT_TITLE, PANEL_W, _header, _place

    width = PANEL_W * ncols + 0.4
    notes = ["prefill = input_tokens / ttft; abandoned generations included in the counts",
             "rollup path: per-minute sketches merged; tails exact where the extremes cover them"]
    texts, depth = _header(width, DEFAULT_TITLE + " for a long model name", notes, ncols)
    fig = Figure(figsize=(width, depth + 1.0), dpi=110)
    renderer = FigureCanvasAgg(fig).get_renderer()
    boxes = [t.get_window_extent(renderer) for t in _place(fig, texts)]
    assert len(boxes) == len(texts) >= 3  # the title and the two notes at least
    if ncols == 1:
        assert texts[0][1].count("\n") >= 1  # the case that overlapped
    for box in boxes:
        assert 0 <= box.x0 and box.x1 <= fig.bbox.width, (box, fig.bbox.width)
    for upper, lower in zip(boxes[:-1], boxes[1:], strict=True):
        assert lower.y1 <= upper.y0, (upper, lower)  # display y grows upward
    assert boxes[-1].y0 >= fig.bbox.height - depth * fig.dpi
