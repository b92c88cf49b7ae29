"""`query bands --stalls`: routing (exact only), refusals that name the flag,
the bound parameters of sql/bands_stalls.sql, and rendering (a fake runner; no store)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pandas as pd
import pytest
from test_analytics_variants import FakeRunner

from phasemeter.analytics.core import STALL_COLUMNS, run_query
from phasemeter.analytics.present import render, table_columns, write_chart
from phasemeter.cli.main import build_parser, main
from phasemeter.timeparse import ArgError

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
DAY = timedelta(days=1)
ROOT = Path(__file__).resolve().parents[3]


def test_flag_parses_on_query_bands():
    assert build_parser().parse_args(["query", "bands", "--stalls"]).stalls
    assert not build_parser().parse_args(["query", "bands"]).stalls


def test_stalls_choose_the_exact_path_even_for_a_long_window():
    runner = FakeRunner(rule="rows")  # the store would say: the rollup
    df, meta = run_query(runner, T0, T0 + 30 * DAY, 3600, kind="stalls")
    [(name, params)] = runner.query()
    assert name == "bands_stalls" and meta["path"] == "exact" and "--stalls" in meta["reason"]
    assert params["abandoned"] == "include" and "prefill" not in params
    assert list(df.columns) == STALL_COLUMNS and meta["kind"] == "stalls"


@pytest.mark.parametrize("argv,needle", [
    (["--rollup"], "--stalls"), (["--latency"], "--stalls"), (["--buckets", "litellm"], "--buckets"),
    (["--prefill", "engine"], "--prefill"),
])
def test_refusals_exit_2_naming_the_flag(argv, needle, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PHASEMETER_DATA_DIR", str(tmp_path))  # never a real store
    assert main(["query", "bands", "--stalls", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    assert not (tmp_path / "store").exists()  # refused before any store was opened


def test_rollup_refusal_says_why():
    with pytest.raises(ArgError, match="no gap data"):
        run_query(FakeRunner(), T0, T0 + DAY, 600, kind="stalls", force="rollup")


def test_columns_are_checked_against_the_stall_view(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PHASEMETER_DATA_DIR", str(tmp_path))
    assert main(["query", "bands", "--stalls", "--columns", "decode_p50"]) == 2
    assert "gap_p99" in capsys.readouterr().err
    assert {"gap_p50", "gap_p99", "gap_max", "stalled_share", "chunk_n"} <= set(table_columns("stalls"))


def _frame() -> pd.DataFrame:
    row = {"t": pd.Timestamp("2026-11-01 00:00"), "model": "m", "input_bucket": "0-512", "n": 10, "chunk_n": 8,
           "gap_n": 8, "gap_p50": 0.04, "gap_p99": 1.2, "gap_max": 1.5, "stalled_n": 2, "stalled_share": 0.25,
           "estimated_n": 1, "abandoned": 0, "abandoned_prefill": 0, "abandoned_decode": 0}
    return pd.DataFrame([row])[STALL_COLUMNS]


META = {"kind": "stalls", "path": "exact", "reason": "--stalls needs raw rows", "method": "exact: ...",
        "step_s": 3600, "start": "a", "end": "b"}


def test_render_table_csv_json():
    df = _frame()
    table = render(df, "table", META)
    assert "gap slow p99" in table and "stalled share" in table and "# path: exact" in table
    assert render(df, "csv", META).splitlines()[0].split(",") == STALL_COLUMNS
    doc = json.loads(render(df, "json", META))
    assert doc["kind"] == "stalls" and doc["rows"][0]["stalled_share"] == 0.25 and "gap_p99" in doc["legend"]
    # One row per line (each by the C encoder), the rest indented; an empty answer has "rows": [].
    from phasemeter.render.table import json_records

    text = render(df, "json", META)
    assert doc["rows"] == json.loads(json.dumps(json_records(df)))
    assert [ln for ln in text.splitlines() if ln.startswith("  {")] == [
        "  " + json.dumps(r) for r in json_records(df)]
    assert json.loads(render(df.iloc[:0], "json", META))["rows"] == []


def test_no_chart_of_stalls(tmp_path):
    with pytest.raises(ArgError, match="--stalls"):
        write_chart(_frame(), META, tmp_path / "x.html")


def test_sql_binds_every_value():
    text = (ROOT / "sql" / "bands_stalls.sql").read_text()
    assert "{abandoned:String} = 'include'" in text and "throwIf(NOT has(['include', 'exclude']" in text
    assert "FROM generations" in text and "generations_minute" not in text
