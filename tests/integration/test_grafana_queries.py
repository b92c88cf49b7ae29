"""Every query of dashboards/grafana/phasemeter.json runs against a real chDB
store with data, after substituting the ClickHouse plugin's macros the way
the plugin does ($__timeFilter, $__timeInterval, $__fromTime, $__toTime,
$__interval_s) and the template variables (${model:singlequote} ...)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import clickhouse_connect
import pytest

from phasemeter.analytics.synth import synthetic_rows
from phasemeter.migrate import migrate
from phasemeter.stream_jobs.sink import Sink

pytestmark = pytest.mark.integration
DASHBOARD = Path(__file__).resolve().parents[2] / "dashboards" / "grafana" / "phasemeter.json"
T0 = (time.time() // 86400 - 1) * 86400


def substitute(sql: str, t_from: int, t_to: int, interval_s: int, variables: dict[str, list[str]]) -> str:
    """Mimics grafana-clickhouse-datasource macro expansion (documented forms)."""
    sql = re.sub(r"\$__timeFilter\(([^)]+)\)",
                 lambda m: f"{m.group(1)} >= toDateTime({t_from}) AND {m.group(1)} <= toDateTime({t_to})", sql)
    sql = re.sub(r"\$__timeInterval\(([^)]+)\)",
                 lambda m: f"toStartOfInterval(toDateTime({m.group(1)}), INTERVAL {interval_s} second)", sql)
    sql = sql.replace("$__fromTime", f"toDateTime({t_from})").replace("$__toTime", f"toDateTime({t_to})")
    sql = sql.replace("$__interval_s", str(interval_s))

    def var(m):
        values = variables[m.group(1)]
        if m.group(2) == "singlequote":
            return ",".join("'" + v.replace("'", "\\'") + "'" for v in values)
        return values[0]
    sql = re.sub(r"\$\{(\w+)(?::(\w+))?\}", var, sql)
    assert "$" not in sql, sql
    return sql


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    c = clickhouse_connect.get_client(dsn=f"chdb://{tmp_path_factory.mktemp('grafana') / 'store'}")
    c.command("CREATE DATABASE IF NOT EXISTS pm")
    c.database = "pm"
    migrate(c)
    sink = Sink.over(c, "chdb://t")
    rows = synthetic_rows(5000, T0, 3 * 3600, seed=3)
    for r in rows[::40]:  # generations that never ended, as the worker writes them (docs/phases.md)
        phase = "prefill" if r["ttft_s"] is None or r["src_offset"] % 80 == 0 else "decode"
        r.update(status="abandoned", finish_reason=f"expired_in_{phase}", output_tokens=0, decode_tps=None,
                 tpot_s=None)
        if phase == "prefill":
            r.update(ttft_s=None, prefill_tps=None, decode_s=None)
    sink.write(rows, [])
    yield c
    c.close()


def queries():
    dash = json.loads(DASHBOARD.read_text())
    out = [(f"variable {v['name']}", v["query"]) for v in dash["templating"]["list"] if v["type"] == "query"]
    for panel in dash["panels"]:
        for target in panel["targets"]:
            out.append((f"panel {panel['title']}", target["rawSql"]))
    return out


def test_dashboard_shape():
    dash = json.loads(DASHBOARD.read_text())
    names = {v["name"] for v in dash["templating"]["list"]}
    assert {"model", "bucket", "datasource"} <= names
    for panel in dash["panels"]:
        assert panel["datasource"]["type"] == "grafana-clickhouse-datasource"
    assert len(queries()) >= 8


@pytest.mark.parametrize("name,sql", queries(), ids=[q[0] for q in queries()])
def test_query_executes_and_returns_rows(client, name, sql):
    models = [r[0] for r in client.query("SELECT DISTINCT model FROM generations").result_rows]
    buckets = [r[0] for r in client.query("SELECT DISTINCT input_bucket FROM generations").result_rows]
    concrete = substitute(sql, int(T0), int(T0 + 3 * 3600), 300, {"model": models, "bucket": buckets[:1]})
    rows = client.query(concrete).result_rows
    assert rows, f"{name}: no rows\n{concrete}"


def panel_sql(title: str) -> str:
    dash = json.loads(DASHBOARD.read_text())
    [panel] = [p for p in dash["panels"] if p["title"] == title]
    return panel["targets"][0]["rawSql"]


def test_abandoned_panels_count_per_model_and_bucket(client):
    models = [r[0] for r in client.query("SELECT DISTINCT model FROM generations").result_rows]
    buckets = [r[0] for r in client.query("SELECT DISTINCT input_bucket FROM generations").result_rows]
    want = {(m, b): n for m, b, n in client.query(
        "SELECT model, input_bucket, countIf(status = 'abandoned') FROM generations GROUP BY model, input_bucket"
    ).result_rows}
    assert sum(want.values()) > 50
    table = substitute(panel_sql("Abandoned generations per model × bucket (whole range)"), int(T0),
                       int(T0 + 3 * 3600), 300, {"model": models, "bucket": buckets})
    got = {(m, b): a for m, b, _n, a, _share in client.query(table).result_rows}
    assert got == want
    series = substitute(panel_sql("Abandoned generations per model × bucket"), int(T0), int(T0 + 3 * 3600), 300,
                        {"model": models, "bucket": buckets})
    per_cell: dict[str, int] = {}
    for _t, cell, n in client.query(series).result_rows:
        per_cell[cell] = per_cell.get(cell, 0) + n
    assert per_cell == {f"{m} · {b}": n for (m, b), n in want.items()}
