"""csv_text.to_csv writes pandas' bytes (phasemeter/render/csv_text.py says why it exists)."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
from hypothesis import given, settings, strategies as st

from phasemeter.render.csv_text import DATE_FORMAT, to_csv


def pandas_csv(df: pd.DataFrame) -> str:
    """pandas' bytes, its text fields escaped as every text output is (textgrid.printable)."""
    from phasemeter.textgrid import printable

    df = df.copy()
    for i in range(df.shape[1]):
        col = df.iloc[:, i]
        if col.dtype == object or pd.api.types.is_string_dtype(col.dtype):
            df.isetitem(i, col.map(lambda v: printable(v) if isinstance(v, str) else v))
    buf = io.StringIO()
    df.to_csv(buf, index=False, date_format=DATE_FORMAT)
    return buf.getvalue()


floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                   st.floats(min_value=-1e12, max_value=1e12),
                   st.integers(min_value=-10**17, max_value=10**17).map(float),
                   st.sampled_from([0.0, -0.0, 1e-4, 9.999999e-5, 1e10, 9999999999.0, 1e16, 5e-324, 0.1, 1 / 3]))
texts = st.one_of(st.none(), st.text(alphabet=st.sampled_from(list('ab ,"\n\r-é0')), max_size=6))


@settings(max_examples=300)
@given(st.lists(st.tuples(floats, floats, st.integers(min_value=-2**63, max_value=2**63 - 1), texts,
                          st.integers(min_value=0, max_value=2**40)), min_size=1, max_size=30))
def test_same_bytes_as_pandas_for_floats_ints_texts_and_times(rows):
    df = pd.DataFrame({
        "t": pd.to_datetime([r[4] for r in rows], unit="s"),
        "x": [r[0] for r in rows], "y, quoted": [r[1] for r in rows], "n": [r[2] for r in rows],
        "model": pd.array([r[3] for r in rows], dtype="object"),
    })
    assert to_csv(df) == pandas_csv(df)
    df["model"] = df["model"].astype("string")  # pandas' own string type, as query frames have
    assert to_csv(df) == pandas_csv(df)
    # The dtypes query frames have: seconds, pd.NA strings, nullable Int64 (abandoned_*).
    df["t"] = df["t"].astype("datetime64[s]")
    df["model"] = pd.array([r[3] for r in rows], dtype=pd.StringDtype(na_value=pd.NA))
    df["count"] = pd.array([None if r[2] % 3 == 0 else r[2] for r in rows], dtype="Int64")
    assert to_csv(df) == pandas_csv(df)


def test_a_bands_like_frame_with_null_columns_and_nat():
    n = 500
    rng = np.random.default_rng(3)
    df = pd.DataFrame({"t": pd.date_range("2026-11-30", periods=n, freq="min"),
                       "model": ["gpt-oss-120b"] * n, "n": rng.integers(0, 300, n),
                       "prefill_p50": rng.lognormal(8, 1, n).astype(np.float32).astype(np.float64),
                       "decode_p1": np.where(rng.random(n) < 0.2, np.nan, rng.lognormal(4, 1, n)),
                       "abandoned_prefill": np.full(n, np.nan)})
    df.loc[3, "t"] = pd.NaT
    assert to_csv(df) == pandas_csv(df)


def test_frames_it_does_not_know_are_written_by_pandas():
    for df in (pd.DataFrame(), pd.DataFrame({"a": []}), pd.DataFrame({"ok": [True, False]}),
               pd.DataFrame({"f": np.float32([1.5, 2])}),
               pd.DataFrame([[1.0, 2.0]], columns=["a", "a"]), pd.DataFrame({"o": [1, "x"]})):
        assert to_csv(df) == pandas_csv(df), df.dtypes


def test_query_frames_are_not_left_to_pandas():
    # The bands frame's dtypes, as query_df and _tidy leave them: every column formatted here.
    from phasemeter.render.csv_text import _column

    df = pd.DataFrame({"t": pd.to_datetime([0, 60], unit="s").astype("datetime64[s]"),
                       "model": pd.array(["a", "b"], dtype=pd.StringDtype(na_value=pd.NA)),
                       "n": np.int64([1, 2]), "prefill_p1": [1.5, np.nan],
                       "abandoned_prefill": pd.array([None, 3], dtype="Int64"), "prefill_variant": ["total", "total"]})
    assert all(_column(df[c]) is not None for c in df.columns)
    assert to_csv(df) == pandas_csv(df)
