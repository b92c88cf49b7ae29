"""CSV text of a result frame: the bytes pandas' `to_csv` writes, formatted in C.

Why not pandas itself: a day at 1-minute steps is 28,800 rows and about
345,000 floats, and pandas formats each float in Python-level code at about
2 µs (0.7-1.0 s of a 1-day answer on a 2-core machine, docs/performance/queries.md).
Arrow's cast of a float to text prints the same shortest round-trip digits
in C++, about 10x faster, but writes some numbers differently from Python's
`repr` (which pandas' output follows): `5` for 5.0 and scientific notation
from 1e10 on. Those are mended here: integral values get their `.0`, and the
few values outside [1e-4, 1e10) are formatted by `repr` one by one. So the
output is byte for byte pandas' (tests/unit/render/test_csv_text.py checks it
against pandas on generated frames); a frame with a column type this module
does not know is written by pandas.

Text fields are escaped first by the rule every text output follows
(phasemeter.textgrid.printable: a control character becomes `\\xNN`), so no
stored label reaches a terminal raw, and no field spans two lines: the CSV
stays valid, one line per row. The JSON output carries the exact values.
"""

from __future__ import annotations

import io
import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from phasemeter.textgrid import CONTROL_CLASS, printable
from phasemeter.timeparse import ISO_UTC as DATE_FORMAT

_QUOTE_IF = (",", '"', *os.linesep)  # csv.QUOTE_MINIMAL: the separator, the quote, the line end


def to_csv(df: pd.DataFrame) -> str:
    """pandas' `df.to_csv(index=False, date_format=DATE_FORMAT)`, faster on float columns."""
    texts = [_column(df[c]) for c in df.columns] if len(df) and len(df.columns) and df.columns.is_unique else [None]
    if any(t is None for t in texts):  # also: no rows or columns (pandas' header rules), repeated names
        buf = io.StringIO()
        _printable_frame(df).to_csv(buf, index=False, date_format=DATE_FORMAT)
        return buf.getvalue()
    nl = os.linesep  # pandas' default line terminator
    header = ",".join(_quoted(pa.array([str(c) for c in df.columns])).to_pylist())
    rows = pc.binary_join_element_wise(*texts, ",").to_pylist()
    return header + nl + nl.join(rows) + nl


def _column(s: pd.Series):
    """The column's CSV fields as an Arrow string array, or None: let pandas write the frame."""
    dtype = s.dtype
    if pd.api.types.is_float_dtype(dtype) and dtype == np.float64:
        return _floats(s.to_numpy())
    if pd.api.types.is_integer_dtype(dtype):  # numpy or pandas' nullable Int64 (the abandoned_* columns)
        return pa.array(s, from_pandas=True).cast(pa.string()).fill_null("")
    if pd.api.types.is_datetime64_dtype(dtype):  # naive: what the queries' frames hold
        # pandas' own strftime, once per distinct time: a day of minute steps
        # repeats each of its 1,440 times once per series (46 -> ~3 ms).
        codes, times = pd.factorize(s)  # NaT: code -1
        text = pa.array(times.strftime(DATE_FORMAT).tolist(), pa.string())
        return text.take(pa.array(codes, mask=codes < 0)).fill_null("")
    if pd.api.types.is_string_dtype(dtype):
        try:  # str, None, NaN, pd.NA only; anything else: pandas' str() of each
            text = pa.array(s, from_pandas=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return None
        if not (pa.types.is_string(text.type) or pa.types.is_large_string(text.type)):
            return None
        return _quoted(_printable(text))
    return None


def _printable(text):
    """textgrid.printable over an Arrow string array: the values that need it
    found in C, escaped one by one (a label with a control character is rare)."""
    hits = pc.fill_null(pc.match_substring_regex(text, CONTROL_CLASS), False)
    if not pc.any(hits).as_py():
        return text
    values = text.to_pylist()
    for i in np.flatnonzero(hits.to_numpy(zero_copy_only=False)):
        values[i] = printable(values[i])
    return pa.array(values, text.type)


def _printable_frame(df: pd.DataFrame) -> pd.DataFrame:
    """The frame pandas writes, its text values escaped (textgrid.printable)."""
    out = None
    for i in range(df.shape[1]):
        col = df.iloc[:, i]
        if col.dtype == object or pd.api.types.is_string_dtype(col.dtype):
            escaped = col.map(lambda v: printable(v) if isinstance(v, str) else v)
            if not escaped.equals(col):
                out = df.copy() if out is None else out
                out.isetitem(i, escaped)
    return df if out is None else out


def _floats(x: np.ndarray):
    text = pc.cast(pa.array(x), pa.string())
    size = np.abs(x)
    # Integral values: Arrow writes 5, Python's repr 5.0 (NaN and inf are not integral here).
    whole = (x == np.floor(x)) & (size < 1e10)
    if whole.any():
        text = pc.if_else(pa.array(whole), pc.binary_join_element_wise(text, ".0", ""), text)
    # Where Arrow and repr choose a different notation, repr each one (rare in these frames);
    # inf is among them (size >= 1e10), NaN is not (every comparison with it is false).
    odd = (x != 0) & ((size < 1e-4) | (size >= 1e10))
    if odd.any():
        values = text.to_pylist()
        for i in np.flatnonzero(odd):
            values[i] = repr(float(x[i]))
        text = pa.array(values, pa.string())
    nan = np.isnan(x)
    if nan.any():  # pandas' na_rep
        text = pc.if_else(pa.array(nan), "", text)
    return text


def _quoted(text):
    """csv.QUOTE_MINIMAL over an Arrow string array, as pandas writes a field; nulls as empty fields."""
    text = text.cast(pa.string())  # pandas' string dtype arrives as large_string; the join wants one type
    pattern = "[" + "".join({"\n": "\\n", "\r": "\\r"}.get(ch, ch) for ch in _QUOTE_IF) + "]"
    needs = pc.fill_null(pc.match_substring_regex(text, pattern), False)
    if pc.any(needs).as_py():
        wrapped = pc.binary_join_element_wise('"', pc.replace_substring(text, '"', '""'), '"', "")
        text = pc.if_else(needs, wrapped, text)
    return pc.fill_null(text, "")
