"""Render result frames as table, CSV or JSON records, saying which end is slow.

One formatter for every frame (throughput bands, latency): callers pass the
columns and the header lines that say what the numbers mean. Unknown values
(NaN, NULL/pd.NA) print as "-" and become JSON null, never 0. A frame is
phasemeter.query.rows.Rows (a text output's, no pandas) or a DataFrame, read
into Rows first (`rows.of`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from phasemeter.analytics.paths import SAMPLES_FOR
from phasemeter.query.queries import METHOD, PERCENTILES, PHASES
from phasemeter.query.rows import Rows, missing, of
from phasemeter.textgrid import printable
from phasemeter.timeparse import ISO_UTC

HEADER_NOTE = ("throughput tokens/s; LOW percentiles are the slow tail "
               "(slow p1 = the slowest 1%), high ones the fast side")
_LABELS = ("model", "input_bucket", "prefill_replica", "decode_replica")
# Abandoned generations per row, when the frame has them (phasemeter.analytics).
ABANDONED_TITLES = (("abandoned", "abandoned"), ("abandoned_prefill", "ab. in prefill"),
                    ("abandoned_decode", "ab. in decode"))


if TYPE_CHECKING:
    import pandas as pd


def num(value) -> str:
    """Throughputs: thousands separators, two decimals below 100."""
    if isinstance(value, float):  # most cells: a float's only missing value is NaN
        if value != value:
            return "-"
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"
    if missing(value):
        return "-"
    return f"{value:,}"


def abandoned_columns(rows: Rows) -> list[tuple[str, str]]:
    return [(c, title) for c, title in ABANDONED_TITLES if rows.has(c)]


# The P/D pool a per-pool frame (`--by`) is grouped by: shown after the model,
# titled by its column (a title starting "decode " would be folded into the
# decode group's header).
POOL_TITLES = (("prefill_replica", "prefill_replica"), ("decode_replica", "decode_replica"))


def lead_columns(df: Rows | None) -> list[tuple[str, str]]:
    """time, model, the pool when the frame has one, bucket."""
    pools = [(c, title) for c, title in POOL_TITLES if df is not None and df.has(c)]
    return [("t", "time (UTC)"), ("model", "model"), *pools, ("input_bucket", "bucket")]


def band_columns(df: Rows | None = None, prefill_label: str = "prefill") -> list[tuple[str, str]]:
    """Throughput columns; the abandoned counts (after n) when `df` has them.
    `prefill_label` names the prefill variant shown, e.g. "prefill (engine)"."""
    short = {"p1": "slow p1", "p5": "slow p5", "p50": "median", "p95": "p95", "p99": "p99"}
    cols = lead_columns(df) + [("n", "n")]
    cols += abandoned_columns(df) if df is not None else []
    for phase in PHASES:
        label = prefill_label if phase == "prefill" else phase
        cols.append((f"{phase}_n", f"{label} n"))
        cols += [(f"{phase}_{p}", f"{label} {short[p]}") for p in PERCENTILES]
    return cols


# Below this many samples a percentile is about the cell's extreme value
# (p1 of 30 samples is the minimum): such cells are marked in tables, and the
# auto step avoids them (one definition, analytics/paths.py).
SMALL_N = SAMPLES_FOR
SMALL_N_NOTE = ("* fewer samples than the percentile needs to mean more than the extreme value "
                "(p1/p99: 100, p5/p95: 20, p90: 10)")
# What a default table shows (it fits 120 columns); --wide shows all.
BAND_DEFAULT = ("t", "model", *(c for c, _ in POOL_TITLES), "input_bucket", "n", "abandoned",
                "prefill_p1", "prefill_p5", "prefill_p50", "decode_p1", "decode_p5", "decode_p50")


def choose_columns(cols: list[tuple[str, str]], default: tuple[str, ...], columns: list[str] | None = None,
                   wide: bool = False) -> list[tuple[str, str]]:
    """`--columns a,b` (in that order, after time/model/bucket), `--wide` (all) or the default set.
    Names are checked before any query (commands call check_columns)."""
    if columns:
        by_key = dict(cols)
        lead = ("t", "model", *(c for c, _ in POOL_TITLES), "input_bucket")
        keys = [k for k in lead if k not in columns] + list(columns)
        return [(k, by_key[k]) for k in keys if k in by_key]
    if wide:
        return cols
    return [c for c in cols if c[0] in default]


def check_columns(columns: list[str] | None, valid: list[str]) -> None:
    from phasemeter.timeparse import ArgError

    unknown = [c for c in columns or [] if c not in valid]
    if unknown:
        raise ArgError(f"--columns: unknown column(s) {', '.join(map(repr, unknown))}; "
                       f"choose from {', '.join(valid)}")


def _small_rows(rows: Rows, key: str) -> list[int]:
    """Rows whose `key` percentile rests on fewer samples than SMALL_N asks."""
    group, _, pct = key.rpartition("_")
    need = SMALL_N.get(pct)
    if need is None or not rows.has(f"{group}_n"):
        return []
    counts = rows.column(f"{group}_n")
    # n < need first: most cells have enough samples (a NaN count compares False)
    return [i for i, (n, v) in enumerate(zip(counts, rows.column(key)))
            if isinstance(n, (int, float)) and n < need and not missing(n) and not missing(v)]


def _time_cells(values: list) -> list[str]:
    """Minutes when every time is on a whole minute, else seconds."""
    whole_minutes = all(getattr(v, "second", 1) == 0 for v in values)
    form = "%Y-%m-%d %H:%M" if whole_minutes else "%Y-%m-%d %H:%M:%S"
    return [v.strftime(form) if hasattr(v, "strftime") else str(v) for v in values]


def _fit_group_labels(group_of: list, widths: list[int], unit: str) -> None:
    """Widen the last column of a group whose label (and unit) is longer than
    its columns, so that two labels never run together ("ttft secondstpot
    seconds" over three narrow columns)."""
    i = 0
    while i < len(group_of):
        j = i
        while j + 1 < len(group_of) and group_of[j + 1] == group_of[i]:
            j += 1
        if group_of[i]:
            span = sum(widths[i:j + 1]) + 2 * (j - i)
            widths[j] += max(0, len(f"{group_of[i]}{unit}") - span)
        i = j + 1


def format_table(frame: Rows | pd.DataFrame, cols: list[tuple[str, str]], header: list[str],
                 fmt: Callable[[object], str] = num, groups: dict[str, str] | None = None,
                 hidden: int = 0, unit: str = "", max_width: int | None = None) -> str:
    """`# header` lines, then an aligned table of `cols` (key, title); numbers right-aligned.
    With `groups` ({key prefix: label}), titles that start with their group's label print
    short under a group line ("prefill tok/s" over "slow p1  slow p5  median")."""
    df = of(frame)
    titles, group_of = [], []
    for key, title in cols:
        label = (groups or {}).get(key.rpartition("_")[0])
        short = label is not None and title.startswith(label + " ")
        titles.append(title[len(label) + 1:] if short else title)
        group_of.append(label if short else None)
    # Column by column, not record by record: a day at 1-minute steps is 28,800 rows.
    columns = [_time_cells(df.column("t"))] if len(df) else [[]]
    marked = False
    for c, _ in cols[1:]:
        values = df.column(c)
        if c in _LABELS:  # stored as sent: escaped before they are measured (textgrid.printable)
            columns.append([printable(str(v)) for v in values])
            continue
        texts = [printable(fmt(v)) for v in values]  # a number's text is printable as it is
        small = _small_rows(df, c)
        if small:
            marked = True
            for i in small:
                texts[i] = f"{texts[i]}*"
        columns.append(texts)
    rows = [titles] + [list(r) for r in zip(*columns)]
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(cols))]
    lines = [f"# {printable(h)}" for h in header]
    keys = [k for k, _ in cols]
    excess = sum(widths) + 2 * (len(widths) - 1) - (max_width or 10**9)
    if excess > 0 and "model" in keys:
        # Long model ids (org/name-size-variant) would push the table past
        # the terminal: shorten them in the middle, where ids differ least.
        i = keys.index("model")
        keep = max(16, widths[i] - excess)
        for r in rows[1:]:
            r[i] = _elide(r[i], keep)
        widths[i] = max(len(str(r[i])) for r in rows)
        lines.append("# model names shortened in the middle to fit; --wide shows them whole")
    if hidden:
        lines.append(f"# {hidden} more column(s): --wide, or --columns NAME,... (see --format csv for names)")
    if any(group_of):
        _fit_group_labels(group_of, widths, unit)
        line, pos, starts = "", 0, []
        for i, w in enumerate(widths):
            starts.append(pos)
            pos += w + 2
        for i, label in enumerate(group_of):
            if label and (i == 0 or group_of[i - 1] != label):
                line = line.ljust(starts[i]) + f"{label}{unit}"
        lines.append(line.rstrip())
    # Padded column by column (a 30-day answer is ~5,000 rows of 12 cells):
    # the title row left-aligned, labels left, numbers right.
    padded = [[str(v).ljust(w) if j < 3 else str(v).rjust(w) for v in col]
              for j, (col, w) in enumerate(zip(zip(*rows[1:]), widths))] if len(rows) > 1 else []
    lines.append("  ".join(str(v).ljust(w) for v, w in zip(rows[0], widths)).rstrip())
    lines.append("  ".join("-" * w for w in widths))
    lines.extend("  ".join(r).rstrip() for r in zip(*padded))
    if len(rows) == 1:
        lines.append("(no generations in this window)")
    elif marked:
        lines.append(SMALL_N_NOTE)
    return "\n".join(lines)


def _elide(text: str, width: int) -> str:
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]


def to_table(frame: Rows | pd.DataFrame, header: list[str] | None = None, prefill_label: str = "prefill",
             columns: list[str] | None = None, wide: bool = False) -> str:
    """Throughput bands; the default header states the exact method. The default
    columns fit 120 characters: slow tail and median per phase, n and abandoned."""
    df = of(frame)
    every = band_columns(df, prefill_label)
    cols = choose_columns(every, BAND_DEFAULT, columns, wide)
    groups = None if wide else {"prefill": prefill_label, "decode": "decode"}
    return format_table(df, cols, header or [HEADER_NOTE, f"method: {METHOD}"], groups=groups,
                        hidden=len(every) - len(cols), unit=" tokens/s", max_width=None if wide else 120)


def to_csv(frame: Rows | pd.DataFrame) -> str:
    """pandas' CSV of the frame (times as ISO 8601 UTC), its floats formatted in C (csv_text)."""
    from phasemeter.render.csv_text import to_csv as fast

    return fast(frame)


def json_records(frame: Rows | pd.DataFrame) -> list[dict]:
    """Rows for JSON: NaN/NULL become null (never 0), numbers plain, times ISO 8601 UTC.

    Column by column: a day at 1-minute steps is 28,800 rows x 20 columns."""
    rows = of(frame)
    if rows.empty:
        return []
    columns = [_json_column(rows.column(c), c) for c in rows.names]
    return [dict(zip(rows.names, values)) for values in zip(*columns)]


def _json_column(values: list, name: str) -> list:
    if name == "t":
        return [v.strftime(ISO_UTC) if hasattr(v, "strftime") and not missing(v) else None for v in values]
    return [None if missing(v) else v.item() if hasattr(v, "item") else v for v in values]
