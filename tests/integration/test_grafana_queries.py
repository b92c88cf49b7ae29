"""Every query of dashboards/grafana/phasemeter.json runs against a real chDB
store with data, after substituting the ClickHouse plugin's macros the way
the plugin does ($__timeFilter, $__timeInterval, $__fromTime, $__toTime,
$__interval_s) and the template variables (${model:singlequote} ...).
The store declares two SLOs before its rows are written (as a worker started
with PHASEMETER_SLOS would), so the SLO panel has per-minute counts to read."""

from __future__ import annotations

import contextlib
import json
import re
import tomllib
from pathlib import Path

import clickhouse_connect
import pytest
from clock import days_ago

from phasemeter.alerts.slo_rules import parse_slos
from phasemeter.demo.disagg import DEPLOYMENT
from phasemeter.demo.rows import synthetic_rows
from phasemeter.store.migrate import migrate
from phasemeter.stream_jobs.sink import Sink

pytestmark = pytest.mark.integration
DASHBOARD = Path(__file__).resolve().parents[2] / "dashboards" / "grafana" / "phasemeter.json"
T0 = days_ago(1)
# As an SLO file, so that a worker over this store (test_grafana_worker) is
# started declaring the same SLOs: a worker retires those it does not declare.
SLOS_TOML = """
[[slo]]
name = "chat"
target = 0.95
objectives = { ttft_s = 2.0, decode_tps = 50.0 }

[[slo]]
name = "long"
buckets = ["8k-32k", "32k+"]
count_failed = false
target = 0.9
objectives = { prefill_tps = 5000.0, e2e_s = 12.0 }
"""
SLOS = parse_slos(tomllib.loads(SLOS_TOML))


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


def fill(c) -> None:
    """The dashboard's store: migrated, the SLOs declared, 3 hours of rows."""
    from datetime import datetime, timezone

    from phasemeter.store import slo_defs

    migrate(c)
    slo_defs.register(c, SLOS, at=datetime.fromtimestamp(T0 - 86400, timezone.utc))
    sink = Sink.over(c, "chdb://t")
    rows = synthetic_rows(5000, T0, 3 * 3600, seed=3)
    for r in rows[::40]:  # generations that never ended, as the worker writes them (docs/phases.md)
        phase = "prefill" if r["ttft_s"] is None or r["src_offset"] % 80 == 0 else "decode"
        r.update(status="abandoned", finish_reason=f"expired_in_{phase}", output_tokens=0, decode_tps=None,
                 tpot_s=None)
        if phase == "prefill":
            r.update(ttft_s=None, prefill_tps=None, decode_s=None)
    # Disaggregated traffic beside it (the demo's `--pd` deployment, one slow
    # decode pool), so the per-pool panels have pools to show.
    sink.write(rows + synthetic_rows(2000, T0, 3 * 3600, seed=5, first_offset=len(rows), deployment=DEPLOYMENT),
               [])


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    c = clickhouse_connect.get_client(dsn=f"chdb://{tmp_path_factory.mktemp('grafana') / 'store'}")
    c.command("CREATE DATABASE IF NOT EXISTS pm")
    c.database = "pm"
    fill(c)
    yield c
    c.close()


def concrete_queries(client) -> dict[str, str]:
    """Every query of the dashboard with the macros and variables expanded
    over the store's 3 hours, at 5-minute intervals (the panels' exact path)."""
    models = sorted(r[0] for r in client.query("SELECT DISTINCT model FROM generations").result_rows)
    buckets = sorted(r[0] for r in client.query("SELECT DISTINCT input_bucket FROM generations").result_rows)
    out = {}
    for i, (name, sql) in enumerate(queries()):
        out[f"{i} {name}"] = substitute(sql, int(T0), int(T0 + 3 * 3600), 300,
                                        {"model": models, "bucket": buckets, "slo": ["chat"]})
    return out


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
    assert dash["panels"], "the dashboard's panels"
    for panel in dash["panels"]:
        assert panel["datasource"]["type"] == "grafana-clickhouse-datasource"
    assert len(queries()) >= 8


@pytest.mark.parametrize("name,sql", queries(), ids=[q[0] for q in queries()])
def test_query_executes_and_returns_rows(client, name, sql):
    models = [r[0] for r in client.query("SELECT DISTINCT model FROM generations").result_rows]
    buckets = [r[0] for r in client.query("SELECT DISTINCT input_bucket FROM generations").result_rows]
    concrete = substitute(sql, int(T0), int(T0 + 3 * 3600), 300, {"model": models, "bucket": buckets[:1],
                                                                   "slo": ["chat"]})
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


def _cli(client, kind: str, t_from: int, t_to: int, step_s: int, path: str):
    """What `phasemeter query bands` / `latency` print by default (no --exact,
    no --rollup) for this window and step; `path`: the one the CLI must take."""
    from datetime import datetime, timezone

    from phasemeter.analytics import run_query
    from phasemeter.query.runner import DirectRunner

    start, end = (datetime.fromtimestamp(t, timezone.utc) for t in (t_from, t_to))
    df, meta = run_query(DirectRunner(client), start, end, step_s, kind=kind)
    assert meta["path"] == path, meta["reason"]
    return df


def _cells(cli) -> dict:
    """The CLI's rows by (model, bucket, naive UTC time), each cell once. Found
    by a filter of the frame per panel point, they took 3-6 s of a window's test."""
    times = cli["t"].dt.tz_localize(None).dt.to_pydatetime()
    cells = {(r["model"], r["input_bucket"], t): r for r, t in zip(cli.to_dict("records"), times, strict=True)}
    assert len(cells) == len(cli)  # no cell twice
    return cells


# (from, to, Grafana's interval, the path the CLI's rule takes): the demo's
# 5-minute cells over its 3 hours (exact: a short window), a step that is not
# whole minutes (exact), and a window over 6 hours (the rollup, minute tier:
# the step is not whole hours, so the CLI reads no coarser tier either).
WINDOWS = [(0, 3 * 3600, 300, "exact"), (600, 2 * 3600 + 600, 90, "exact"), (-5 * 3600, 3 * 3600, 600, "rollup")]


@pytest.mark.parametrize("phase", ["prefill", "decode"])
@pytest.mark.parametrize("lo,hi,interval,path", WINDOWS)
def test_throughput_panels_equal_query_bands_on_every_cell(client, phase, lo, hi, interval, path):
    """Each panel chooses its path by the CLI's rule (bands_view, schema/0024),
    so every point of every repeated bucket panel equals what `query bands`
    prints by default for the same window and step, the slow tail p1/p5 included."""
    t_from, t_to = int(T0 + lo), int(T0 + hi)
    models = sorted(r[0] for r in client.query("SELECT DISTINCT model FROM generations").result_rows)
    cli = _cli(client, "bands", t_from, t_to, interval, path)
    title = "Prefill tokens/s —" if phase == "prefill" else "Decode tokens/s —"
    [sql] = [s for name, s in queries() if name.startswith(f"panel {title}")]
    compared, cells = 0, _cells(cli)
    for bucket in sorted(set(cli["input_bucket"])):  # the panel repeats per bucket
        rows = client.query(substitute(sql, t_from, t_to, interval, {"model": models, "bucket": [bucket]})).result_rows
        for time_, model, p1, p5, p50, p95 in rows:
            want = cells[(model, bucket, time_.replace(tzinfo=None))]
            got = {"p1": p1, "p5": p5, "p50": p50, "p95": p95}
            assert got == pytest.approx({q: want[f"{phase}_{q}"] for q in got}, rel=0, abs=0, nan_ok=True), \
                (bucket, model, time_)
            compared += 1
    assert compared == len(cli)


@pytest.mark.parametrize("lo,hi,interval,path", WINDOWS)
def test_latency_panels_equal_query_latency(client, lo, hi, interval, path):
    t_from, t_to = int(T0 + lo), int(T0 + hi)
    models = sorted(r[0] for r in client.query("SELECT DISTINCT model FROM generations").result_rows)
    buckets = sorted(r[0] for r in client.query("SELECT DISTINCT input_bucket FROM generations").result_rows)
    cli = _cli(client, "latency", t_from, t_to, interval, path)
    cells = _cells(cli)
    for title, kind in (("TTFT seconds", "ttft"), ("Queue seconds", "queue")):
        [sql] = [s for name, s in queries() if name.startswith(f"panel {title}")]
        rows = client.query(substitute(sql, t_from, t_to, interval, {"model": models, "bucket": buckets})).result_rows
        assert len(rows) == len(cli)
        for time_, cell, *qs in rows:
            model, bucket = cell.split(" · ")
            want = cells[(model, bucket, time_.replace(tzinfo=None))]
            assert qs == pytest.approx([want[f"{kind}_{q}"] for q in ("p50", "p90", "p99")], rel=0, abs=0,
                                       nan_ok=True), (title, cell, time_)


def test_panels_read_from_to_exclusive_like_the_cli(client):
    """A minute starting exactly at the range's end is not in it (the CLI
    reads [from, to)); $__timeFilter would include it."""
    minute = int(T0 + 3600)
    models = [r[0] for r in client.query("SELECT DISTINCT model FROM generations").result_rows]
    buckets = [r[0] for r in client.query("SELECT DISTINCT input_bucket FROM generations").result_rows]
    want = client.query(f"SELECT sum(n) FROM generations_minute WHERE minute >= toDateTime({minute - 600}) "
                        f"AND minute < toDateTime({minute})").result_rows[0][0]
    sql = substitute(panel_sql("Generations per interval"), minute - 600, minute, 60,
                     {"model": models, "bucket": buckets})
    assert sum(n for _t, _m, n in client.query(sql).result_rows) == want > 0
    assert len(queries()) >= 8
    for name, sql in queries():
        assert "$__timeFilter" not in sql, name


def test_bucket_variable_lists_buckets_by_lower_edge(client):
    dash = json.loads(DASHBOARD.read_text())
    [var] = [v for v in dash["templating"]["list"] if v["name"] == "bucket"]
    assert var["sort"] == 0  # Grafana keeps the query's order
    got = [r[0] for r in client.query(substitute(var["query"], int(T0), int(T0 + 3 * 3600), 300, {})).result_rows]
    from phasemeter.stream_jobs.buckets import labels, parse_edges

    order = labels(parse_edges("default"))
    assert got == [b for b in order if b in got] and len(got) >= 3


@pytest.mark.parametrize("name,interval,bucket_pick,lo,path", [
    ("chat", 300, "all", 7 * 60, "exact"), ("chat", 600, "first two", 7 * 60, "exact"),
    ("long", 900, "all", 7 * 60, "exact"), ("chat", 90, "all", 7 * 60 + 30, "exact"),
    ("chat", 600, "all", -4 * 3600 + 7 * 60, "rollup"), ("long", 900, "all", -4 * 3600 + 7 * 60, "rollup")])
def test_slo_panel_equals_phasemeter_slo(client, name, interval, bucket_pick, lo, path):
    """Every point of the SLO panel equals what `phasemeter slo --by model`
    reads by default for that SLO (found by name), model, window and step, on
    the path the CLI takes (slo_view, schema/0026); its target line is the
    SLO's target."""
    from datetime import datetime, timezone

    from phasemeter.analytics.slo import attainment
    from phasemeter.query.runner import DirectRunner
    from phasemeter.stream_jobs.buckets import labels, parse_edges

    order = labels(parse_edges("default"))
    slo = SLOS.get(name)
    t_from, t_to = int(T0 + lo), int(T0 + 3 * 3600 - 3 * 60)  # not on a step boundary
    models = sorted(r[0] for r in client.query("SELECT DISTINCT model FROM generations").result_rows)
    buckets = order if bucket_pick == "all" else order[:2]
    start, end = (datetime.fromtimestamp(t, timezone.utc) for t in (t_from, t_to))
    rows, meta = attainment(DirectRunner(client), slo, start, end, interval, models, buckets, order, by="model")
    assert meta["path"] == path and len(rows) > 10, meta["reason"]
    want = {(int(r["t"].timestamp()), r["model"]): r["attainment"] for r in rows}
    assert len(set(want.values())) > 3  # attainment varies: a wrong count cannot match by luck
    variables = {"model": models, "bucket": buckets, "slo": [name]}
    attained, target = (substitute(sql, t_from, t_to, interval, variables)
                        for title, sql in queries() if title.startswith("panel SLO attainment"))
    got = {(int(t.replace(tzinfo=timezone.utc).timestamp()), m): a for t, m, a in client.query(attained).result_rows}
    assert got == pytest.approx(want, rel=0, abs=0)
    line = client.query(target).result_rows
    assert [v for _t, v in line] == [slo.target, slo.target]
    assert [int(t.replace(tzinfo=timezone.utc).timestamp()) for t, _v in line] == [t_from, t_to]


def test_slo_rollup_view_is_the_clis_rollup_query():
    """The panel reads slo_rollup_view (schema/0018); the CLI's rollup path,
    sql/slo_rollup.sql, only selects from it (as bands_rollup.sql does from
    0007): one definition, and no copy of its body."""
    root = Path(__file__).resolve().parents[2]
    cli = "\n".join(ln for ln in (root / "sql" / "slo_rollup.sql").read_text().splitlines()
                    if not ln.strip().startswith("--"))
    assert "FROM slo_rollup_view(" in cli and "slo_minute" not in cli and "sumForEachMerge" not in cli


def _shape_rows(shape: str) -> list[dict]:
    """An hour of rows: none, a sparse few, or rows whose latencies and
    throughputs are mostly null (failed before the first token, one output token)."""
    if shape == "empty":
        return []
    rows = synthetic_rows(40 if shape == "sparse" else 600, T0, 3600, seed=4)
    if shape == "nullheavy":
        for i, r in enumerate(rows):
            r.update(ttft_s=None, prefill_tps=None, prefill_tps_uncached=None, decode_s=None, decode_tps=None,
                     tpot_s=None, queue_s=None)
            if i % 2:
                r.update(status="error", output_tokens=0)
    return rows


@contextlib.contextmanager
def _shape_store(client, db: str, shape: str):
    """`client` on a scratch database `db`, migrated and holding
    _shape_rows(shape), for the block; its own database again after."""
    home = client.database
    client.command(f"DROP DATABASE IF EXISTS {db}")
    client.command(f"CREATE DATABASE {db}")
    client.database = db
    try:
        migrate(client)
        rows = _shape_rows(shape)
        if rows:
            Sink.over(client, "chdb://t").write(rows, [])
        yield rows
    finally:
        client.database = home


@pytest.mark.parametrize("shape", ["empty", "sparse", "nullheavy"])
def test_the_slo_panel_says_no_slo_declared_instead_of_an_error(client, shape):
    """Without a declared SLO (no worker started with PHASEMETER_SLOS: the
    variable lists none, or names one the store does not know), the SLO
    panel's queries answer no rows, never an error (slo_view passed the
    missing definition's NULLs on as parameters), and the panel says why
    (its noValue text) rather than a line at 0. Declared on the same rows,
    the SLO's target line is drawn and no point is a 0 made of no generations."""
    from datetime import datetime, timezone

    from phasemeter.store import slo_defs
    from phasemeter.stream_jobs.buckets import labels, parse_edges

    with _shape_store(client, f"pm_slo_{shape}", shape) as rows:
        models = sorted({r["model"] for r in rows})
        attained, target = [sql for title, sql in queries() if title.startswith("panel SLO attainment")]
        t_from, t_to = int(T0), int(T0 + 3600)

        def panel(slo: str) -> tuple[list, list]:
            variables = {"model": models, "bucket": labels(parse_edges("default")), "slo": [slo]}
            return tuple(client.query(substitute(sql, t_from, t_to, 300, variables)).result_rows
                         for sql in (attained, target))

        for slo in ("", "chat"):
            assert panel(slo) == ([], []), (shape, slo)
        dash = json.loads(DASHBOARD.read_text())
        [shown] = {p["fieldConfig"]["defaults"].get("noValue") for p in dash["panels"]
                   if p["title"].startswith("SLO attainment")}
        assert "no SLO declared" in shown and "PHASEMETER_SLOS" in shown, shown

        slo_defs.register(client, SLOS, at=datetime.fromtimestamp(T0 - 86400, timezone.utc))
        points, line = panel("chat")
        assert [v for _t, v in line] == [SLOS.get("chat").target] * 2, shape
        assert bool(points) == (shape != "empty"), (shape, points)
        assert all(0 <= a <= 1 for _t, _m, a in points), points
        n = {(t, m): c for t, m, c in client.query(
            "SELECT t, model, sum(counts[1]) FROM slo_view(start = toDateTime({a:UInt32}), end = toDateTime({b:UInt32}), "
            "step_s = 300, slo = 'chat', models = [], buckets = []) GROUP BY t, model",
            parameters={"a": t_from, "b": t_to}).result_rows}
        assert len(points) == sum(1 for c in n.values() if c > 0), (points, n)  # a point per cell with generations


POOL_PANELS = {"Prefill tokens/s per prefill pool": ("bands", "prefill_replica", "prefill"),
               "Decode tokens/s per decode pool": ("bands", "decode_replica", "decode"),
               "KV transfer seconds per decode pool": ("latency", "decode_replica", "kv_transfer")}


def pool_panel(title: str) -> str:
    [sql] = [s for name, s in queries() if name.startswith(f"panel {title}")]
    return sql


@pytest.mark.parametrize("title", sorted(POOL_PANELS))
def test_pool_panels_equal_the_clis_by_pool_answer_on_every_cell(client, title):
    """Every point of a per-pool panel equals what `phasemeter query bands
    --by ...` / `latency --by ...` prints for the same cell, window and step
    (one definition: the pool views of schema/0027), and every pool cell
    the CLI shows is drawn; cells of no pool (a unified server's) are not."""
    from datetime import datetime, timezone

    from phasemeter.analytics import run_query
    from phasemeter.query.runner import DirectRunner

    kind, by, col = POOL_PANELS[title]
    t_from, t_to, interval = int(T0 + 600), int(T0 + 3 * 3600 - 120), 600
    start, end = (datetime.fromtimestamp(t, timezone.utc) for t in (t_from, t_to))
    cli, meta = run_query(DirectRunner(client), start, end, interval, kind=kind, by=by)
    cli = cli[cli[by] != ""]
    if kind == "latency":
        cli = cli[cli["kv_transfer_n"] > 0]
    assert len(cli) > 20 and set(cli[by]) == set(DEPLOYMENT.prefill_pools if by == "prefill_replica"
                                                    else DEPLOYMENT.decode_pools)
    want = {}
    for r in cli.to_dict("records"):
        cell = f"{r['model']} · {r[by]}" + ("" if kind == "bands" else f" · {r['input_bucket']}")
        qs = ("p5", "p50") if kind == "bands" else ("p50", "p90", "p99")
        want[(r["t"].tz_localize(None) if hasattr(r["t"], "tz_localize") else r["t"], cell, r["input_bucket"])] = \
            [r[f"{col}_{q}"] for q in qs]
    models = sorted(r[0] for r in client.query("SELECT DISTINCT model FROM generations").result_rows)
    buckets = sorted(set(cli["input_bucket"]))
    got = {}
    for bucket in buckets if kind == "bands" else [None]:  # the bands panels repeat per bucket
        picked = [bucket] if bucket else buckets
        sql = substitute(pool_panel(title), t_from, t_to, interval, {"model": models, "bucket": picked})
        for time_, cell, *qs in client.query(sql).result_rows:
            got[(time_.replace(tzinfo=None), cell, bucket or cell.split(" · ")[-1])] = qs
    assert len(got) == len(want) and got.keys() == want.keys()
    for key, qs in got.items():
        assert qs == pytest.approx(want[key], rel=0, abs=0, nan_ok=True), (title, key)


@pytest.mark.parametrize("shape", ["empty", "sparse", "nullheavy"])
def test_pool_panels_say_no_pools_on_data_without_them(client, shape):
    """On a store without P/D traffic (none, few, or null-heavy rows) the
    per-pool panels answer no rows, never an error, and say why (noValue)."""
    with _shape_store(client, f"pm_pool_{shape}", shape) as rows:
        from phasemeter.stream_jobs.buckets import labels, parse_edges

        variables = {"model": sorted({r["model"] for r in rows}) or ["none"],
                     "bucket": labels(parse_edges("default"))}
        assert len(POOL_PANELS) == 3
        for title in POOL_PANELS:
            sql = substitute(pool_panel(title), int(T0), int(T0 + 3600), 300, variables)
            assert client.query(sql).result_rows == [], (shape, title)
        dash = json.loads(DASHBOARD.read_text())
        shown = [p["fieldConfig"]["defaults"].get("noValue") for p in dash["panels"]
                 if p["title"].startswith(tuple(POOL_PANELS))]
        assert len(shown) == 3
        for text in shown:
            assert text and "No P/D pools" in text and "prefill_replica" in text, text
