"""Outputs say in words that the low percentiles are the slow tail."""

import json

import numpy as np
import pandas as pd

from phasemeter.analytics.present import render as render_meta
from phasemeter.render.table import to_table
from phasemeter.query.queries import BAND_COLUMNS, METHOD, order_bands

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
    text = render_meta(variant_frame(), "table", meta, wide=True)  # every column, one title each
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
    text = render_meta(df, "table", meta, wide=True)
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
    from phasemeter.render.table import json_records, num

    assert num(pd.NA) == "-" and num(None) == "-" and num(float("nan")) == "-"
    df = pd.DataFrame({"t": [pd.Timestamp("2026-11-29")], "a": pd.array([pd.NA], dtype="Int64"),
                       "b": [np.int64(7)]})
    assert json_records(df) == [{"t": "2026-11-29T00:00:00Z", "a": None, "b": 7}]


def test_json_records_column_by_column_equal_a_value_by_value_reading():
    # Every dtype a result frame has: numpy floats with NaN, numpy ints, bools, nullable Int64
    # with pd.NA, pandas strings with pd.NA, objects; each value as the JSON reader should get it.
    from phasemeter.render.table import json_records

    df = pd.DataFrame({"t": pd.to_datetime([0, 60, 120], unit="s").astype("datetime64[s]"),
                       "model": pd.array(["a", None, "c,\"d"], dtype=pd.StringDtype(na_value=pd.NA)),
                       "n": np.int64([1, 2, 3]), "ok": [True, False, True], "p1": [1.5, np.nan, 1e-7],
                       "ab": pd.array([None, 3, 4], dtype="Int64"), "variant": ["total", None, "total"]})
    want = [{"t": f"1970-01-01T00:0{i}:00Z", "model": ["a", None, 'c,"d'][i], "n": i + 1, "ok": i != 1,
             "p1": [1.5, None, 1e-7][i], "ab": [None, 3, 4][i], "variant": ["total", None, "total"][i]}
            for i in range(3)]
    got = json_records(df)
    assert got == want
    assert [type(v) for v in got[2].values()] == [str, str, int, bool, float, int, str]
    assert json_records(df.iloc[:0]) == []


def realistic(n: int = 2000) -> pd.DataFrame:
    """A cell as the demo gives it: long model names, five-digit throughputs."""
    from phasemeter.analytics.core import BANDS_COLUMNS

    df = variant_frame()
    df["model"] = "meta-llama/Llama-3.1-70B-Instruct"
    for phase, base in (("prefill", 48_123.4), ("decode", 71.25)):
        df[f"{phase}_n"] = n
        for k, q in enumerate(("p1", "p5", "p50", "p95", "p99")):
            df[f"{phase}_{q}"] = base * (1 + k)
    df["n"], df["abandoned"] = n * 12, 1234
    return df[BANDS_COLUMNS]


def test_default_table_fits_120_columns_and_says_how_to_see_the_rest():
    for kind in ("bands", "latency"):
        if kind == "bands":
            text = render_meta(realistic(), "table", META)
        else:
            from phasemeter.analytics.core import LATENCY_COLUMNS

            df = pd.DataFrame([{c: 0.1234 for c in LATENCY_COLUMNS}] * 3)
            df = df.assign(t=pd.Timestamp("2026-11-29 10:00"), model="meta-llama/Llama-3.1-70B-Instruct",
                           input_bucket="8k-32k", n=24_000, abandoned=12, ttft_n=24_000, tpot_n=24_000,
                           queue_n=24_000)
            text = render_meta(df, "table", {**META, "kind": "latency"})
        table = [ln for ln in text.splitlines() if not ln.startswith("#")]
        assert max(map(len, table)) <= 120, (kind, max(map(len, table)), "\n".join(table))
        assert "--wide" in text and "--columns" in text
    wide = render_meta(realistic(), "table", META, wide=True)
    assert "prefill p99" in wide and "ab. in decode" in wide and "--wide" not in wide


def test_default_table_groups_phases_and_keeps_the_slow_tail_first():
    text = render_meta(realistic(), "table", META)
    lines = text.splitlines()
    titles = next(i for i, ln in enumerate(lines) if ln.startswith("time (UTC)"))
    group = lines[titles - 1]
    assert group.index("prefill tokens/s") < group.index("decode tokens/s")
    assert lines[titles].count("slow p1") == 2 and lines[titles].count("median") == 2
    assert lines[titles].index("slow p1") < lines[titles].index("slow p5") < lines[titles].index("median")
    assert "2026-11-29 10:00 " in text  # whole minutes: no seconds column


def test_columns_chooses_and_orders_and_unknown_names_are_refused():
    import pytest

    from phasemeter.analytics.present import table_columns
    from phasemeter.render.table import check_columns
    from phasemeter.timeparse import ArgError

    text = render_meta(realistic(), "table", META, columns=["decode_p1", "prefill_p99"])
    titles = next(ln for ln in text.splitlines() if ln.startswith("time (UTC)"))
    assert titles.split()[:3] == ["time", "(UTC)", "model"] and titles.index("slow p1") < titles.index("p99")
    check_columns(["decode_p1", "abandoned_decode"], table_columns("bands"))
    with pytest.raises(ArgError, match=r"--columns: unknown column\(s\) 'decode_p2'.*decode_p1"):
        check_columns(["decode_p2"], table_columns("bands"))
    with pytest.raises(ArgError, match="ttft_p99"):
        check_columns(["ttft_p95"], table_columns("latency"))


def test_percentiles_from_too_few_samples_are_marked():
    few = realistic(n=30)  # p1 of 30 is about the minimum; p5 needs 20
    text = render_meta(few, "table", META, wide=True)
    row = next(ln for ln in text.splitlines() if "32k+" in ln)
    assert row.count("*") == 4  # prefill p1/p99, decode p1/p99
    assert "fewer samples than the percentile needs" in text
    plenty = render_meta(realistic(n=150), "table", META, wide=True)
    assert "*" not in plenty.split("# ")[-1].split("\n", 1)[1]


def test_buckets_not_in_the_edges_sort_after_the_known_ones_then_by_name():
    df = pd.DataFrame({"model": ["b", "a", "a", "a", "a"], "t": [1, 2, 3, 4, 5],
                       "input_bucket": pd.array(["2k-8k", "zz", "0-512", "aa", "512-2k"], dtype="string")})
    ordered = order_bands(df, ["0-512", "512-2k", "2k-8k"])
    assert list(zip(ordered["model"], ordered["input_bucket"], strict=True)) == [
        ("a", "0-512"), ("a", "512-2k"), ("a", "aa"), ("a", "zz"), ("b", "2k-8k")]


def test_group_labels_never_run_together_over_narrow_columns():
    """Three narrow groups (as `phasemeter demo --pd`'s latency table has):
    each label starts over its first column with two spaces before the next."""
    from phasemeter.render.table import format_table

    df = pd.DataFrame({"t": [pd.Timestamp("2026-11-29 10:00")], "ttft_p50": [0.1], "tpot_p50": [0.02],
                       "kv_p50": [0.003]})
    cols = [("t", "time"), ("ttft_p50", "ttft p50"), ("tpot_p50", "tpot p50"), ("kv_p50", "kv p50")]
    text = format_table(df, cols, [], groups={"ttft": "ttft", "tpot": "tpot", "kv": "kv"}, unit=" seconds")
    group_line, titles = text.splitlines()[0], text.splitlines()[1]
    assert "ttft seconds  tpot seconds  kv seconds" in group_line, text
    starts = [group_line.index(f"{label} seconds") for label in ("ttft", "tpot", "kv")]
    title_starts = [i for i in range(len(titles)) if titles.startswith("p50", i)]
    assert len(title_starts) == 3 and starts == title_starts, text
