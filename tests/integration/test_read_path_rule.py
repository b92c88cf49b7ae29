"""The exact-or-rollup rule (schema/0023_read_path_rule.sql) on a real chDB
store: the one definition the CLI's reads (sql/read_path.sql) and the Grafana
panels (bands_view, latency_view) follow."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pandas as pd
import pytest
from clock import days_ago
from stores import migrated_client

from phasemeter.demo.rows import synthetic_rows
from phasemeter.query.runner import DirectRunner
from phasemeter.store.client import load_sql
from phasemeter.stream_jobs.sink import Sink

pytestmark = pytest.mark.integration
H = 3600
T0 = datetime.fromtimestamp(days_ago(2), timezone.utc)  # within the raw TTL


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with migrated_client(tmp_path_factory.mktemp("rule"), "pm") as c:
        Sink.over(c, "chdb://t").write(synthetic_rows(600, T0.timestamp(), 2 * H, seed=4), [])
        yield c


@pytest.mark.parametrize("window_s,step_s,rows,rule", [
    (30 * 86400, 60, 0, "window"),          # long window
    (6 * H + 1, 120, 0, "window"),
    (6 * H, 60, 1000, "short"),             # not longer than 6 h, few rows
    (2 * H, 60, 5_000_001, "rows"),         # short but heavy
    (2 * H, 60, 5_000_000, "short"),
    (30 * 86400, 30, 10**9, "step"),        # step finer than the rollup grain
    (30 * 86400, 90, 10**9, "step"),        # not whole minutes
])
def test_the_rule(client, window_s, step_s, rows, rule):
    got = client.query("SELECT phasemeter_read_path_v1({w:Float64}, {s:UInt32}, {r:UInt64})",
                       parameters={"w": window_s, "s": step_s, "r": rows}).result_rows
    assert got == [(rule,)]


def _verdict(client, start, end, step_s, models=(), buckets=()):
    df = DirectRunner(client).df("read_path", {"start": start.replace(tzinfo=None), "end": end.replace(tzinfo=None),
                                               "step_s": step_s, "models": list(models), "buckets": list(buckets)})
    assert len(df) == 1
    return df.iloc[0].to_dict()


def test_raw_rows_are_counted_with_the_filters_only_when_they_can_change_the_answer(client):
    rows = synthetic_rows(600, T0.timestamp(), 2 * H, seed=4)
    model = rows[0]["model"]
    short = _verdict(client, T0, T0 + timedelta(hours=2), 300)
    assert (short["rule"], short["rollup"], short["raw_rows"]) == ("short", 0, 600)
    one = _verdict(client, T0, T0 + timedelta(hours=2), 300, models=[model])
    assert one["raw_rows"] == sum(r["model"] == model for r in rows) < 600
    long = _verdict(client, T0, T0 + timedelta(days=2), 300)
    assert (long["rule"], long["rollup"]) == ("window", 1) and pd.isna(long["raw_rows"])  # NULL: not counted
    step = _verdict(client, T0, T0 + timedelta(hours=2), 30)
    assert step["rule"] == "step" and pd.isna(step["raw_rows"])
    assert (short["grain_s"], short["rollup_window_s"], short["rollup_raw_rows"]) == (60, 6 * H, 5_000_000)


def test_the_cli_file_is_the_view():
    text = load_sql("read_path")
    assert "FROM read_path_view(" in text and "generations" not in text.replace("read_path_view", "")
