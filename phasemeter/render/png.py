"""Percentile-band charts for prefill/decode throughput.

One row per (model, phase), one column per input bucket. For a throughput the
slow tail is the LOW percentile (p1/p5), so those lines are drawn in a warm
colour, labelled "slow tail", and the figure says so in words. Optional note
lines under the title (e.g. which prefill variant, whether abandoned
generations are included); frames with abandoned counts get them per panel.

Uses `matplotlib.figure.Figure` directly instead of pyplot: no global figure
registry, no interactive backend, safe to call from a worker or a test.
"""

from __future__ import annotations

import io
import warnings
import os
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import dates as mdates
from matplotlib import ticker
from matplotlib.font_manager import FontProperties
from matplotlib.figure import Figure
from matplotlib.textpath import text_to_path

from phasemeter.files import write_file
from phasemeter.textgrid import printable

PHASES = ("prefill", "decode")
PCTS = ("p1", "p5", "p50", "p95", "p99")
REQUIRED = ["t", "model", "input_bucket", "n"] + [
    f"{ph}_{s}" for ph in PHASES for s in ("n",) + PCTS
]
DEFAULT_TITLE = "phasemeter — throughput bands (low percentiles = slow tail)"

# Same colours for both phases so one legend serves the whole figure; the
# phase is in every panel title and in the row's y label.
BAND = "#4c72b0"
TAIL_P1 = "#c0392b"
TAIL_P5 = "#d35400"
LEGEND_ORDER = ["median (p50)", "p5–p95 band", "p1–p99 band", "slow tail p5", "slow tail p1"]
SLOW_TAIL_NOTE = "throughput: lower = slower, so the LOW percentiles (p1, p5) are the slow tail"
PANEL_W, PANEL_H = 3.2, 2.4  # inches per column / row


def _check_columns(df: pd.DataFrame) -> None:
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise ValueError(f"render_bands_png: missing column(s): {', '.join(missing)}")


def _ordered(values: pd.Series, preferred: list[str] | None) -> list[str]:
    """`preferred` order first, then any unlisted label in order of first
    appearance (never drop data just because the caller's list is stale)."""
    seen = list(dict.fromkeys(values.astype(str)))
    if not preferred:
        return seen
    head = [b for b in preferred if b in seen]
    return head + [b for b in seen if b not in head]


def _break_gaps(g: pd.DataFrame, step: pd.Timedelta | None) -> pd.DataFrame:
    """Insert a NaN row wherever consecutive steps are further apart than
    1.5 steps, so lines and bands break instead of bridging missing data."""
    if step is None or len(g) < 2:
        return g
    gap = g["t"].diff() > step * 1.5
    if not gap.any():
        return g
    filler = g.loc[gap, ["t"]].copy()
    filler["t"] = filler["t"] - step  # lands inside the gap
    return pd.concat([g, filler]).sort_values("t", kind="stable")


def _kfmt(v: float, _pos: object) -> str:
    # "12k" instead of "12000": narrow panels, big numbers.
    return f"{v / 1000:g}k" if abs(v) >= 1000 else f"{v:g}"


def _panel_frames(df: pd.DataFrame, models, buckets):
    """Private: {(model, bucket): rows sorted by t} for every panel."""
    groups = {k: g.sort_values("t") for k, g in df.groupby(["model", "input_bucket"], sort=False)}
    return {(m, b): groups.get((m, b), df.iloc[0:0]) for m in models for b in buckets}


def _abandoned_label(g: pd.DataFrame, phase: str) -> str:
    """"abandoned 12 (5 before 1st token)" for prefill, "(7 in decode)" for decode;
    the split only when known (the rollup has none). "" without the columns."""
    if "abandoned" not in g.columns:
        return ""
    total = int(np.nansum(g["abandoned"].to_numpy(dtype=float)))
    split = g.get(f"abandoned_{phase}")
    if split is None or split.isna().any() or not len(g):
        return f"\nabandoned {total:,}"
    where = "before 1st token" if phase == "prefill" else "in decode"
    return f"\nabandoned {total:,} ({int(split.sum()):,} {where})"


def _draw_panel(ax, g: pd.DataFrame, phase: str, step) -> None:
    cols = [f"{phase}_{p}" for p in PCTS]
    extra = _abandoned_label(g, phase)
    g = g[["t", f"{phase}_n", *cols]].dropna(subset=cols, how="all")
    n_total = int(np.nansum(g[f"{phase}_n"].to_numpy(dtype=float)))
    if g.empty:
        ax.text(0.5, 0.5, "no data" + extra, transform=ax.transAxes, ha="center",
                va="center", color="0.5", fontsize=10 if not extra else 8)
        ax.set_yticks([])
        return
    g = _break_gaps(g, step)
    t = g["t"].to_numpy()
    p1, p5, p50, p95, p99 = (g[c].to_numpy(dtype=float) for c in cols)
    mk = "o" if len(g) < 3 else None  # a lone point draws no line or band
    ax.fill_between(t, p1, p99, color=BAND, alpha=0.10, lw=0, label="p1–p99 band")
    ax.fill_between(t, p5, p95, color=BAND, alpha=0.28, lw=0, label="p5–p95 band")
    ax.plot(t, p50, color=BAND, lw=1.8, marker=mk, ms=3, label="median (p50)")
    ax.plot(t, p5, color=TAIL_P5, lw=1.3, ls="-.", marker=mk, ms=3, label="slow tail p5")
    ax.plot(t, p1, color=TAIL_P1, lw=1.5, ls="--", marker=mk, ms=3, label="slow tail p1")
    # From zero, so a drop reads as its true size; 15% headroom keeps the
    # n= label clear of the band.
    top = np.nanmax(np.r_[p99, p95, p50])
    ax.set_ylim(0, top * 1.15 if top > 0 else 1)
    ax.text(0.98, 0.96, f"n={n_total:,}{extra}", transform=ax.transAxes, ha="right",
            va="top", fontsize=7.5, color="0.25",
            bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.75))


# Margins of the grid, in inches: the y label and tick labels left of each
# panel, its title above, the x tick labels and the date under the decode
# row of each model (the prefill row above it shares its x range and hides
# its own).
LEFT, RIGHT, BOTTOM = 0.72, 0.14, 0.42
COL_GAP, TITLE_H, MODEL_GAP = 0.5, 0.3, 0.62


def _grid(fig: Figure, width: float, height: float, head_h: float, nrows: int, ncols: int):
    """The panels' axes, rows of (prefill, decode) per model, placed in inches."""
    models = max(1, nrows // 2)
    pair = 2 if nrows > 1 else 1
    top = head_h + TITLE_H
    ax_w = (width - LEFT - RIGHT - (ncols - 1) * COL_GAP) / ncols
    ax_h = (height - top - BOTTOM - (models - 1) * MODEL_GAP - models * (pair - 1) * TITLE_H) / nrows
    axes = np.empty((nrows, ncols), dtype=object)
    for r in range(nrows):
        y_top = top + r * (ax_h + TITLE_H) + (r // pair) * (MODEL_GAP - TITLE_H)
        for c in range(ncols):
            x = LEFT + c * (ax_w + COL_GAP)
            axes[r, c] = fig.add_axes((x / width, 1 - (y_top + ax_h) / height, ax_w / width, ax_h / height))
    return axes


def _wrap(text: str, size: float, weight: str, max_w: float) -> list[str]:
    """`text` broken at spaces into lines at most `max_w` inches wide, measured
    with the font (a single longer word stays whole). Matplotlib's own
    `wrap=True` breaks lines only when drawing, so the header's height could
    not be known beforehand and a wrapped title ran into the line below it."""
    font = FontProperties(size=size, weight=weight)
    lines, line = [], ""
    for word in text.split(" "):
        trial = f"{line} {word}" if line else word
        if line and text_to_path.get_text_width_height_descent(trial, font, ismath=False)[0] / 72 > max_w:
            lines.append(line)
            line = word
        else:
            line = trial
    return [*lines, line]


def _header(width: float, title: str, notes: list[str], ncols: int):
    """The title, the slow-tail note and the notes, stacked top-down:
    [(top in inches, text, font size, style)], and the depth they take."""
    wide = ncols > 1
    items = [(title, 13 if wide else 10.5, {"fontweight": "bold"}),
             (SLOW_TAIL_NOTE, 9.5 if wide else 7.5, {"color": TAIL_P1}),
             *((note, 8.5 if wide else 6.5, {"color": "0.25"}) for note in notes)]
    y, placed = 0.12, []
    for text, size, style in items:
        lines = _wrap(text, size, style.get("fontweight", "normal"), width - 0.3)
        placed.append((y, "\n".join(lines), size, style))
        y += len(lines) * size * 1.25 / 72 + 0.05
    return placed, y


def _place(fig: Figure, texts) -> list:
    height = fig.get_figheight()
    return [fig.text(0.5, 1 - y / height, text, ha="center", va="top", fontsize=size, **style)
            for y, text, size, style in texts]


def render_bands_png(
    df: pd.DataFrame,
    path: str | os.PathLike,
    *,
    bucket_order: list[str] | None = None,
    title: str | None = None,
    notes: list[str] | None = None,
    prefill_label: str = "prefill",
) -> Path:
    """Render p1/p5/p50/p95/p99 throughput bands to a PNG and return its path.
    `prefill_label` names the prefill variant in panel titles and axes."""
    _check_columns(df)
    out = Path(path)
    df = df.copy()
    df["t"] = pd.to_datetime(df["t"])
    if df["t"].dt.tz is not None:  # contract is UTC-naive; tolerate aware input
        df["t"] = df["t"].dt.tz_convert("UTC").dt.tz_localize(None)
    df["model"] = df["model"].astype(str)
    df["input_bucket"] = df["input_bucket"].astype(str)

    models = list(dict.fromkeys(df["model"]))
    buckets = _ordered(df["input_bucket"], bucket_order)
    nrows, ncols = max(1, 2 * len(models)), max(1, len(buckets))
    # Step size from the whole frame: used only to break lines across gaps.
    ts = np.sort(df["t"].unique())
    diffs = np.diff(ts)
    step = pd.Timedelta(np.median(diffs)) if len(diffs) else None

    # A fixed layout in inches, not matplotlib's constrained layout: every
    # panel has the same size and the same kind of labels, so the margins are
    # known in advance, and solving them took over 6 s of an 8.9 s chart of 40
    # panels (docs/performance/reads.md). Title, notes and legend sit in a header band
    # of fixed height above the grid.
    leg_cols = {1: 2, 2: 3}.get(ncols, len(LEGEND_ORDER))
    leg_rows = -(-len(LEGEND_ORDER) // leg_cols)
    width = PANEL_W * ncols + 0.4
    texts, text_h = _header(width, title or DEFAULT_TITLE, list(notes or []), ncols)
    head_h = text_h + 0.135 + 0.22 * leg_rows
    height = PANEL_H * nrows + head_h
    fig = Figure(figsize=(width, height), dpi=110)
    _place(fig, texts)
    axes = _grid(fig, width, height, head_h, nrows, ncols)
    if not models:  # empty query result: still produce an honest picture
        axes[0][0].text(0.5, 0.5, "no data", ha="center", va="center",
                        transform=axes[0][0].transAxes, color="0.5")
        axes[0][0].set_axis_off()
    panels = _panel_frames(df, models, buckets) if models else {}

    for mi, model in enumerate(models):
        mt = df.loc[df["model"] == model, "t"]
        # One x range per model (all buckets, both phases) so prefill and
        # decode of the same model line up vertically and across buckets.
        lo, hi = mt.min(), mt.max()
        if lo == hi:
            pad = step or pd.Timedelta(minutes=1)
            lo, hi = lo - pad, hi + pad
        for pi, phase in enumerate(PHASES):
            row = 2 * mi + pi
            for ci, bucket in enumerate(buckets):
                ax = axes[row][ci]
                _draw_panel(ax, panels[(model, bucket)], phase, step)
                label = prefill_label if phase == "prefill" else phase
                # y given: matplotlib then skips placing each title clear of the
                # tick labels above it (there are none), 1.5 s of 40 panels.
                ax.set_title(f"{printable(model)} · {printable(bucket)} · {label}", fontsize=8.5, loc="left", y=1.0)
                ax.set_xlim(lo, hi)
                loc = mdates.AutoDateLocator(minticks=3, maxticks=5)
                ax.xaxis.set_major_locator(loc)
                ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(loc))
                ax.yaxis.set_major_formatter(ticker.FuncFormatter(_kfmt))
                ax.tick_params(labelsize=7.5)
                ax.xaxis.get_offset_text().set_fontsize(7.5)
                ax.grid(True, color="0.9", lw=0.6)
                if ci == 0:
                    ax.set_ylabel(f"{label} tok/s", fontsize=9)
                if phase == "prefill":
                    # Same x range as the decode panel below: its labels suffice.
                    ax.tick_params(labelbottom=False)
                    ax.xaxis.get_offset_text().set_visible(False)

    # One legend for the whole figure, from the first panel that drew lines.
    for ax in axes.flat:
        found = dict(zip(*reversed(ax.get_legend_handles_labels())))
        if found:
            labels = [lb for lb in LEGEND_ORDER if lb in found]
            fig.legend([found[lb] for lb in labels], labels, loc="lower center",
                       ncol=leg_cols, fontsize=9, frameon=False, handlelength=2.6,
                       bbox_to_anchor=(0.5, 1 - head_h / height))
            break

    # The file's suffix picks the format: a .svg path gets a real SVG (text
    # stays text), never PNG bytes under an .svg name.
    import matplotlib

    buf = io.BytesIO()  # bytes, not a path: a chart the worker draws is written by the CLI
    # SVG text as <text>, not glyph paths; element ids from a fixed salt, not
    # random ones: the same chart is the same file, whichever process drew it.
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "phasemeter"}), warnings.catch_warnings():
        # On a short window AutoDateLocator finds no interval of its table within
        # maxticks, falls back to one it names, and says so on stderr, once per
        # process: the chart is right, and the operator has nothing to do.
        warnings.filterwarnings("ignore", message="AutoDateLocator was unable", category=UserWarning)
        fig.savefig(buf, format="svg" if Path(out).suffix.lower() == ".svg" else "png", dpi=110)
    fig.clear()  # no pyplot registry to close; drop artists promptly
    return write_file(out, buf.getvalue())
