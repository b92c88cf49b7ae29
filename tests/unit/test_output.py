"""Outputs say in words that the low percentiles are the slow tail."""

import json

import numpy as np
import pandas as pd

from phasemeter.analytics.present import render as render_meta
from phasemeter.output import to_table
from phasemeter.queries import BAND_COLUMNS, METHOD, order_bands

META = {"kind": "bands", "path": "exact", "reason": "short window", "method": METHOD, "step_s": 60,
        "start": "2026-11-29T09:00:00Z", "end": "2026-11-29T11:00:00Z"}


def render(df, fmt, step_s):
    """What `query bands` prints (phasemeter.analytics.present.render)."""
    return render_meta(df, fmt, {**META, "step_s": step_s})


def frame():
    rows = []
    for bucket in ("32k+", "0-512", "2k-8k"):
        row = {c: 1.0 for c in BAND_COLUMNS}
        row.update(t=pd.Timestamp("2026-11-29 10:00"), model="m", input_bucket=bucket, n=3,
                   prefill_n=3, decode_n=0, decode_p1=np.nan)
        rows.append(row)
    return pd.DataFrame(rows, columns=BAND_COLUMNS)


def test_table_labels_slow_tail_and_method():
    text = render(frame(), "table", 60)
    assert "slow p1" in text and "slow tail" in text and "linear" in text


def test_json_nan_is_null_not_zero():
    payload = json.loads(render(frame(), "json", 60))
    assert payload["legend"]["p1"] == "slow tail p1"
    assert payload["rows"][0]["decode_p1"] is None


def test_buckets_sorted_by_edge_not_alphabet():
    ordered = order_bands(frame(), ["0-512", "512-2k", "2k-8k", "8k-32k", "32k+"])
    assert list(ordered["input_bucket"]) == ["0-512", "2k-8k", "32k+"]


def test_csv_has_header():
    assert render(frame(), "csv", 60).splitlines()[0].startswith("t,model,input_bucket,n")


def test_demo_table_states_the_method_and_the_slow_tail():
    text = to_table(frame())
    assert text.splitlines()[1] == f"# method: {METHOD}" and "slow p1" in text
