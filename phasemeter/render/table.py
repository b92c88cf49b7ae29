"""Render result frames as table, CSV or JSON records, saying which end is slow.

One formatter for every frame (throughput bands, latency): callers pass the
columns and the header lines that say what the numbers mean. Unknown values
(NaN, NULL/pd.NA) print as "-" and become JSON null, never 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd

from phasemeter.analytics.paths import SAMPLES_FOR
from phasemeter.query.queries import METHOD, PERCENTILES, PHASES
from phasemeter.textgrid import printable
from phasemeter.timeparse import ISO_UTC

HEADER_NOTE = ("throughput tokens/s; LOW percentiles are the slow tail "
               "(slow p1 = the slowest 1%), high ones the fast side")
_LABELS = ("model", "input_bucket", "prefill_replica", "decode_replica")
# Abandoned generations per row, when the frame has them (phasemeter.analytics).
ABANDONED_TITLES = (("abandoned", "abandoned"), ("abandoned_prefill", "ab. in prefill"),
                    ("abandoned_decode", "ab. in decode"))


def _missing(value) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def num(value) -> str:
    """Throughputs: thousands separators, two decimals below 100."""
    if _missing(value):
        return "-"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"
    return f"{value:,}"


def abandoned_columns(df: pd.DataFrame) -> list[tuple[str, str]]:
    return [(c, title) for c, title in ABANDONED_TITLES if c in df.columns]


# The P/D pool a per-pool frame (`--by`) is grouped by: shown after the model,
# titled by its column (a title starting "decode " would be folded into the
# decode group's header).
POOL_TITLES = (("prefill_replica", "prefill_replica"), ("decode_replica", "decode_replica"))


def lead_columns(df: pd.DataFrame | None) -> list[tuple[str, str]]:
    """time, model, the pool when the frame has one, bucket."""
    pools = [(c, title) for c, title in POOL_TITLES if df is not None and c in df.columns]
    return [("t", "time (UTC)"), ("model", "model"), *pools, ("input_bucket", "bucket")]


def band_columns(df: pd.DataFrame | None = None, prefill_label: str = "prefill") -> list[tuple[str, str]]:
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


def _small_mask(df: pd.DataFrame, key: str) -> np.ndarray | None:
    """Rows whose `key` percentile rests on fewer samples than SMALL_N asks (None: no such rule)."""
    group, _, pct = key.rpartition("_")
    need = SMALL_N.get(pct)
    if need is None or f"{group}_n" not in df.columns:
        return None
    n = pd.to_numeric(df[f"{group}_n"], errors="coerce")
    value = df[key]
    return (n.notna() & value.notna() & (n < need)).to_numpy(dtype=bool)


def _time_cells(t: pd.Series) -> list[str]:
    """Minutes when every time is on a whole minute, else seconds."""
    values = t.tolist()
    whole_minutes = all(getattr(v, "second", 1) == 0 for v in values)
    form = "%Y-%m-%d %H:%M" if whole_minutes else "%Y-%m-%d %H:%M:%S"
    if pd.api.types.is_datetime64_dtype(t.dtype) and not t.isna().any():
        return t.dt.strftime(form).tolist()
    return [v.strftime(form) if hasattr(v, "strftime") else str(v) for v in values]


def format_table(df: pd.DataFrame, cols: list[tuple[str, str]], header: list[str],
                 fmt: Callable[[object], str] = num, groups: dict[str, str] | None = None,
                 hidden: int = 0, unit: str = "", max_width: int | None = None) -> str:
    """`# header` lines, then an aligned table of `cols` (key, title); numbers right-aligned.
    With `groups` ({key prefix: label}), titles that start with their group's label print
    short under a group line ("prefill tok/s" over "slow p1  slow p5  median")."""
    titles, group_of = [], []
    for key, title in cols:
        label = (groups or {}).get(key.rpartition("_")[0])
        short = label is not None and title.startswith(label + " ")
        titles.append(title[len(label) + 1:] if short else title)
        group_of.append(label if short else None)
    # Column by column, not record by record: a day at 1-minute steps is 28,800 rows.
    columns = [_time_cells(df["t"])] if len(df) else [[]]
    marked = False
    for c, _ in cols[1:]:
        values = df[c].tolist()
        if c in _LABELS:  # stored as sent: escaped before they are measured (textgrid.printable)
            columns.append([printable(str(v)) for v in values])
            continue
        texts = [fmt(v) for v in values]
        if not pd.api.types.is_numeric_dtype(df[c].dtype):
            texts = [printable(t) for t in texts]
        small = _small_mask(df, c)
        if small is not None and small.any():
            marked = True
            for i in np.flatnonzero(small):
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
        line, pos, starts = "", 0, []
        for i, w in enumerate(widths):
            starts.append(pos)
            pos += w + 2
        for i, label in enumerate(group_of):
            if label and (i == 0 or group_of[i - 1] != label):
                line = line.ljust(starts[i]) + f"{label}{unit}"
        lines.append(line.rstrip())
    for i, r in enumerate(rows):
        lines.append("  ".join(str(v).rjust(w) if i and j >= 3 else str(v).ljust(w)
                               for j, (v, w) in enumerate(zip(r, widths))).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
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


def to_table(df: pd.DataFrame, header: list[str] | None = None, prefill_label: str = "prefill",
             columns: list[str] | None = None, wide: bool = False) -> str:
    """Throughput bands; the default header states the exact method. The default
    columns fit 120 characters: slow tail and median per phase, n and abandoned."""
    every = band_columns(df, prefill_label)
    cols = choose_columns(every, BAND_DEFAULT, columns, wide)
    groups = None if wide else {"prefill": prefill_label, "decode": "decode"}
    return format_table(df, cols, header or [HEADER_NOTE, f"method: {METHOD}"], groups=groups,
                        hidden=len(every) - len(cols), unit=" tokens/s", max_width=None if wide else 120)


def to_csv(df: pd.DataFrame) -> str:
    """pandas' CSV of the frame (times as ISO 8601 UTC), its floats formatted in C (csv_text)."""
    from phasemeter.render.csv_text import to_csv as fast

    return fast(df)


def json_records(df: pd.DataFrame) -> list[dict]:
    """Rows for JSON: NaN/NULL become null (never 0), numbers plain, times ISO 8601 UTC.

    Column by column, not value by value: a day at 1-minute steps is 28,800
    rows x 20 columns, and a Python test per value took 0.7 s of it."""
    if df.empty:
        return []
    columns = [_json_column(df[c], c) for c in df.columns]
    names = list(df.columns)
    return [dict(zip(names, values)) for values in zip(*columns)]


def json_floats(values: np.ndarray) -> list:
    """A numpy float array as JSON cells: Python floats, NaN as None. tolist()
    converts in C; a cell at a time took ~0.27 s for a day at 1-minute steps
    (28,800 rows x 20 columns)."""
    cells = values.tolist()
    for i in np.flatnonzero(np.isnan(values)).tolist():
        cells[i] = None
    return cells


def _json_column(col: pd.Series, name) -> list:
    if name == "t":
        text = pd.to_datetime(col).dt.strftime(ISO_UTC)
        return [v if isinstance(v, str) else None for v in text.tolist()]
    numpy = isinstance(col.dtype, np.dtype)  # not pandas' nullable Int64/Float64 (pd.NA inside)
    if numpy and col.dtype.kind == "f":  # numpy floats: NaN -> None, the rest Python floats
        return json_floats(col.to_numpy())
    if numpy and col.dtype.kind in "iub":  # numpy ints and bools: no missing values
        return col.tolist()
    return [None if _missing(v) else v.item() if hasattr(v, "item") else v for v in col.tolist()]
