"""phasemeter.query.rows: plain columns for the text outputs, no pandas."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta, timezone


def test_missing_knows_pandas_values_without_importing_pandas():
    code = ("import sys; from phasemeter.query.rows import missing; "
            "print(missing(None), missing(float('nan')), missing(0), missing(''), 'pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "True", "False", "False", "False"]
    import numpy as np
    import pandas as pd

    from phasemeter.query.rows import missing

    assert missing(pd.NA) and missing(pd.NaT) and missing(np.float64("nan"))
    assert not missing(pd.Timestamp(0)) and not missing(np.int64(0)) and not missing(0.0)


def test_rows_of_a_frame_hold_python_values_and_none_for_missing():
    import pandas as pd

    from phasemeter.query.rows import Rows, naive_utc, of

    df = pd.DataFrame({"t": pd.to_datetime([0, 60], unit="s"), "n": pd.array([1, None], dtype="Int64"),
                       "p": [1.5, float("nan")], "m": ["a", None]})
    rows = of(df)
    assert rows.names == ["t", "n", "p", "m"] and len(rows) == 2 and not rows.empty
    assert rows.column("n") == [1, None] and rows.column("m") == ["a", None]
    assert rows.column("p")[0] == 1.5 and rows.column("p")[1] != rows.column("p")[1]  # NaN stays a float
    assert of(rows) is rows
    assert rows.take([1, 0]).column("n") == [None, 1] and rows.select(["m"]).records() == [("a",), (None,)]
    assert Rows(["a"], [[]]).empty
    aware = datetime(2026, 1, 1, 1, tzinfo=timezone(timedelta(hours=1)))
    assert naive_utc(aware) == datetime(2026, 1, 1) and naive_utc(5) == 5
