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


def variant_frame(split_known=True):
    """BANDS_COLUMNS frame as run_query returns it: abandoned counts, prefill variant."""
    from phasemeter.analytics.core import BANDS_COLUMNS

    df = frame().assign(abandoned=[4, 0, 2], prefill_variant="engine")
    split = ([3, 0, 1], [1, 0, 1]) if split_known else ([None] * 3, [None] * 3)
    df["abandoned_prefill"] = pd.array(split[0], dtype="Int64")
    df["abandoned_decode"] = pd.array(split[1], dtype="Int64")
    return df[BANDS_COLUMNS]


def test_table_names_the_prefill_variant_and_counts_abandoned():
    meta = {**META, "prefill": "engine", "abandoned": "exclude", "abandoned_split": True}
    text = render_meta(variant_frame(), "table", meta)
    head = text.splitlines()
    assert "# prefill = engine: input_tokens / (ttft_s - queue_s)" in text and "EXCLUDED" in text
    titles = next(ln for ln in head if ln.startswith("time (UTC)"))
    assert "prefill (engine) slow p1" in titles and "decode slow p1" in titles
    assert titles.index("abandoned") < titles.index("ab. in prefill") < titles.index("ab. in decode")
    assert "slow tail" in text  # the low end is still called the slow tail
    row = next(ln for ln in head if "32k+" in ln)
    assert row.split()[4:8] == ["3", "4", "3", "1"]  # (date, time, model, bucket) n, abandoned, in prefill, in decode


def test_rollup_split_is_unknown_not_zero():
    meta = {**META, "path": "rollup", "abandoned_split": False}
    df = variant_frame(split_known=False)
    text = render_meta(df, "table", meta)
    assert "not kept by the rollup" in text
    row = next(ln for ln in text.splitlines() if "32k+" in ln)
    assert row.split()[4:8] == ["3", "4", "-", "-"]
    payload = json.loads(render_meta(df, "json", meta))
    assert payload["abandoned_split"] is False and payload["abandoned"] == "include"
    assert [(r["abandoned"], r["abandoned_prefill"], r["abandoned_decode"]) for r in payload["rows"]] == [
        (4, None, None), (0, None, None), (2, None, None)]


def test_json_and_csv_carry_variant_and_counts():
    meta = {**META, "prefill": "uncached"}
    payload = json.loads(render_meta(variant_frame(), "json", meta))
    assert payload["prefill"] == "uncached" and "cached_input_tokens" in payload["prefill_definition"]
    assert payload["legend"]["p1"] == "slow tail p1" and "abandoned_prefill" in payload["abandoned_legend"]
    assert payload["rows"][0]["abandoned_prefill"] == 3 and isinstance(payload["rows"][0]["abandoned"], int)
    csv = render_meta(variant_frame(), "csv", meta).splitlines()
    assert csv[0].endswith("abandoned,abandoned_prefill,abandoned_decode,prefill_variant")
    assert csv[1].endswith(",4,3,1,engine")


def test_num_and_json_records_treat_missing_as_unknown():
    from phasemeter.output import json_records, num

    assert num(pd.NA) == "-" and num(None) == "-" and num(float("nan")) == "-"
    df = pd.DataFrame({"t": [pd.Timestamp("2026-11-29")], "a": pd.array([pd.NA], dtype="Int64"),
                       "b": [np.int64(7)]})
    assert json_records(df) == [{"t": "2026-11-29T00:00:00Z", "a": None, "b": 7}]
